#!/bin/sh
# it_deploy_static.sh: static checks of the deployment examples that no test runs on a real system
# (deploy/systemd/, deploy/k8s/): the systemd units pass `systemd-analyze verify`; the Kubernetes
# manifests parse; and every flag that a unit or a manifest passes to bin/coordinator, shard-server
# or worker is one that binary's --help lists (so the examples do not rot when flags change).
# Parts whose tool is missing (systemd-analyze, python3-yaml) are skipped with a message.
. "$(dirname "$0")/lib.sh"
checked=0

# ---- systemd: verify with the binaries and the env file of this checkout
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$TMP/units"
  for f in deploy/systemd/*.service; do
    sed "s#/usr/local/bin/#$ROOT/bin/#; s#/etc/diloco/diloco.env#$ROOT/deploy/systemd/diloco.env.example#" "$f" \
      > "$TMP/units/$(basename "$f")"
  done
  cp "$TMP/units/shard-server@.service" "$TMP/units/shard-server@7001.service"
  (cd "$TMP/units" && systemd-analyze verify --man=no ./redis-diloco.service ./coordinator.service \
     ./shard-server@7001.service) > "$TMP/verify.log" 2>&1 || fail "systemd-analyze verify: $(cat "$TMP/verify.log")"
  grep -v "^$" "$TMP/verify.log" | grep -q . && fail "systemd-analyze verify warns: $(cat "$TMP/verify.log")"
  say "systemd units verify"; checked=$((checked + 1))
else
  say "systemd-analyze missing: units not verified"
fi

# ---- flags used by the units and manifests exist
python3 - "$ROOT" > "$TMP/flags.log" 2>&1 <<'EOF' || fail "flag check: $(cat "$TMP/flags.log")"
import glob, os, re, subprocess, sys
root = sys.argv[1]
helps = {}
def help_of(cmd):
    if cmd not in helps:
        p = subprocess.run([os.path.join(root, 'bin', cmd[0])] + list(cmd[1:]) + ['--help'],
                           capture_output=True, text=True)
        helps[cmd] = p.stdout + p.stderr
    return helps[cmd]
def check(where, argv):
    prog = os.path.basename(argv[0])
    if prog not in ('coordinator', 'shard-server', 'worker'):
        return 0
    cmd = (prog,) + ((argv[1],) if prog == 'coordinator' else ())
    text = help_of(cmd)
    bad = [a for a in argv if a.startswith('--') and not re.search(re.escape(a.split('=')[0]) + r'\b', text)]
    if bad:
        print(f'{where}: {" ".join(cmd)} has no {bad}'); sys.exit(1)
    return 1
n = 0
for f in glob.glob(os.path.join(root, 'deploy/systemd/*.service')):
    text = open(f).read().replace('\\\n', ' ')
    for line in text.splitlines():
        if line.startswith('ExecStart='):
            n += check(f, line[len('ExecStart='):].split())
try:
    import yaml
except ImportError:
    print('python3-yaml missing: manifests not parsed'); print(f'{n} command lines checked'); sys.exit(0)
for f in glob.glob(os.path.join(root, 'deploy/k8s/*.yaml')):
    for d in yaml.safe_load_all(open(f)):
        if not d: continue
        spec = d.get('spec', {})
        pod = spec.get('template', {}).get('spec', {}) if 'template' in spec else {}
        for c in pod.get('containers', []):
            argv = (c.get('command') or []) + (c.get('args') or [])
            n += check(f'{f} {c["name"]}', argv)
print(f'{n} command lines checked')
EOF
grep -q "command lines checked" "$TMP/flags.log" || fail "flag check printed: $(cat "$TMP/flags.log")"
say "flags: $(cat "$TMP/flags.log" | tr '\n' ' ')"
checked=$((checked + 1))
echo "PASS it_deploy_static ($checked checks)"
