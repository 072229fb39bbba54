"""bench/quality_report.py: the report of bench/quality (table.md and the gnuplot plots from
result.json): the gap of every configuration to the best data-parallel run and to the one at the same
inner lr, the main table of one row per H, the overhead table of --overhead. bench/quality imports it."""
import os
import shutil
import subprocess
import sys

# the build log of the torchft DiLoCo reproduction (../shared/seeds): gap to its DP baseline per H
TORCHFT_GAP = {25: 2.8, 50: 4.7, 100: 6.3, 200: 7.4, 500: 9.4}


def gap(loss, dp):
    return 100.0 * (loss - dp) / dp


def data_text(result):
    """How the DiLoCo workers divided the training split, and the data seed."""
    d = result.get("data", {})
    n = result["workers"]
    text = "worker i trains on stripes i, i+%d, ... of %d tokens of the training split (stripe layout)" % (
        n, d["shard_stripe"]) if d.get("shard_layout") == "stripe" else \
        "worker i trains on the i-th contiguous %s of the training split" % ("quarter" if n == 4 else "1/%d" % n)
    return text + ", DP on all of it; data seed %d%s" % (d.get("data_seed", 1), "; token file %s" % d["data_file"]
                                                          if d.get("data_file") else "")


def layout(result):
    return result.get("data", {}).get("shard_layout", "contiguous")


def overhead_report(out, result):
    """--overhead: training wall time and sync time with an evaluator at every version and without."""
    lines = ["# bench/quality --overhead", "",
             "H=10, %d workers, %d steps each; an evaluator at every version (the worst case) or none; "
             "command: `%s`." % (result["workers"], result["model"]["steps"], result["command"]), "",
             "| pair | training wall time with / without | mean sync with / without (s) | barrier wait with / without (s) |",
             "|---|---|---|---|"]
    res = {r["name"]: r for r in result["runs"]}
    tw, ts = [], []
    i = 0
    while "overhead_with_%d" % i in res and "overhead_without_%d" % i in res:
        a, b = res["overhead_with_%d" % i], res["overhead_without_%d" % i]
        tw.append(a["train_seconds"] / b["train_seconds"])
        ts.append(a["sync_seconds"] / b["sync_seconds"])
        lines.append("| %d | %.1f / %.1f s (x%.3f) | %.4f / %.4f (x%.3f) | %.4f / %.4f |" % (
            i, a["train_seconds"], b["train_seconds"], tw[-1], a["sync_seconds"], b["sync_seconds"], ts[-1],
            a["sync_wait_seconds"], b["sync_wait_seconds"]))
        i += 1
    if tw:
        lines += ["", "Mean ratio with / without: training wall time x%.3f, sync time x%.3f (%d pairs)." % (
            sum(tw) / len(tw), sum(ts) / len(ts), len(tw))]
    cpu = [(r["evaluator_cpu_seconds"], r["workers_cpu_seconds"]) for r in result["runs"]
           if r.get("evaluator") and r.get("workers_cpu_seconds")]
    if cpu:
        lines += ["", "CPU: the evaluator used %.1f s against the workers' %.1f s (%.1f%%)." % (
            sum(a for a, _ in cpu), sum(b for _, b in cpu), 100.0 * sum(a for a, _ in cpu) / sum(b for _, b in cpu))]
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def inner_lr(result, r):
    return r.get("inner_lr", result["model"]["lr"])


def best_dp(result):
    """The baseline: the DP run with the lowest final loss over the inner learning rates tried (a DP
    that trains better at another inner lr is the one DiLoCo has to match)."""
    dps = [r for r in result["runs"] if r.get("kind") == "dp" and r.get("final_loss") is not None]
    return min(dps, key=lambda r: r["final_loss"]) if dps else None


def mode_text(r):
    mode = r.get("mode", "sync")
    if r.get("dn"):
        mode += " + DN %d" % r["dn"]
    if r.get("rule"):
        mode += " + %s" % r["rule"] + (" x %g" % r["rebase_fraction"] if r.get("rebase_fraction") else "")
    if r.get("lookahead"):
        mode += " + ahead %g" % r["lookahead"]
    if r.get("fragments", 1) > 1:
        mode += " Streaming F=%d" % r["fragments"]
    if r.get("group", 1) > 1:
        mode += ", %d groups of %d ranks (DP inside)" % (r["workers"], r["group"])
    if not r.get("nesterov", True):
        mode += ", plain momentum"
    if r.get("slow"):
        mode += ", worker 0 %gx slower" % r["slow"] + (", steps in proportion to speed" if r.get("balanced") else "") + \
            (", fast workers S x the steps" if r.get("equal_time") else "")
    if r.get("dylu"):
        mode += ", DyLU"
    if r.get("idle"):
        mode += ", every worker %gx idle" % r["idle"]
    return mode


def report(out, result, headline="", compare=None):
    """table.md: the main table (one row per H: the configurations hH_HEADLINE, or hH), every DP run,
    every other configuration, the best outer settings per H. Gaps are to the best DP run and to the DP
    run at the same inner lr."""
    if any(r["name"].startswith("overhead_") for r in result["runs"]):
        return overhead_report(out, result)
    res = {r["name"]: r for r in result["runs"]}
    dp = best_dp(result)
    lines = ["# bench/quality results", "",
             "Model: %s; %d workers; %d inner steps each; data: %s; command: `%s`." % (
                 result["model_text"], result["workers"], result["model"]["steps"], data_text(result),
                 result["command"]), ""]
    if not dp:
        lines.append("(no DP baseline yet)")
        return finish_report(out, result, lines, headline)
    dp_at = {inner_lr(result, r): r for r in result["runs"] if r.get("kind") == "dp"}

    def gaps(r):
        same = dp_at.get(inner_lr(result, r))
        return "%+.1f%%" % gap(r["final_loss"], dp["final_loss"]), \
            "%+.1f%%" % gap(r["final_loss"], same["final_loss"]) if same else "-"

    def note(r):
        return " (%s)" % r["build"] if r.get("build") else ""

    lines += ["DP baseline: final validation loss **%.4f** at inner lr %g, the best of the DP runs (one worker, "
              "batch x%d, %d tokens):" % (dp["final_loss"], inner_lr(result, dp), result["workers"], dp["tokens"]),
              "", "| DP inner lr | final eval loss |", "|---|---|"]
    for lr in sorted(dp_at):
        lines.append("| %g | %.4f%s |" % (lr, dp_at[lr]["final_loss"], note(dp_at[lr])))
    main = headline_runs(result, headline)
    if main:
        lines += ["", "| H | outer lr | outer momentum | inner lr | final eval loss | gap to DP | gap to DP at the "
                  "same inner lr | torchft build log |", "|---|---|---|---|---|---|---|---|"]
        for r in main:
            tf = "+%.1f%%" % TORCHFT_GAP[r["H"]] if r["H"] in TORCHFT_GAP else ""
            lines.append("| %d | %g | %g | %g | %.4f%s | %s | %s | %s |" % (
                (r["H"], r["lr"], r["mu"], inner_lr(result, r), r["final_loss"], note(r)) + gaps(r) + (tf,)))
    others = [r for r in result["runs"] if r.get("kind") != "dp" and r not in main]
    if others:
        lines += ["", "| configuration | H | mode | outer lr | outer momentum | inner lr | final eval loss | gap to DP "
                  "| gap to DP at the same inner lr |", "|---|---|---|---|---|---|---|---|---|"]
        for r in others:
            lines.append("| %s%s | %d | %s | %g | %g | %g | %.4f | %s | %s |" % (
                (r["name"], note(r), r["H"], mode_text(r), r["lr"], r["mu"], inner_lr(result, r), r["final_loss"])
                + gaps(r)))
    if compare:
        lines += compare_table(result, compare[1], compare[0])
    best = best_per_h(result) if headline != "best" else []
    if best:
        lines += ["", "Best settings per H among the sync configurations run:", "",
                  "| H | outer lr | outer momentum | inner lr | final eval loss | gap to DP | gap to DP at the same "
                  "inner lr |", "|---|---|---|---|---|---|---|"]
        for h, r in best:
            lines.append("| %d | %g | %g | %g | %.4f | %s | %s |" % (
                (h, r["lr"], r["mu"], inner_lr(result, r), r["final_loss"]) + gaps(r)))
    return finish_report(out, result, lines, headline, compare)


def headline_runs(result, headline):
    """The main table's runs, one per H: hH_HEADLINE (hH without one), or with "best" the sync run with
    the lowest final loss at each H."""
    if headline == "best":
        return [r for _, r in best_per_h(result) if r["H"] in (1, 10, 50, 100, 500)]
    res = {r["name"]: r for r in result["runs"]}
    names = ["h%d_%s" % (h, headline) if headline else "h%d" % h for h in (1, 10, 50, 100, 500)]
    return [res[n] for n in names if n in res]


def compare_table(result, other, other_name):
    """--compare: every configuration both results have, side by side, each gap to its own best DP."""
    dp, odp = best_dp(result), best_dp(other)
    theirs = {r["name"]: r for r in other["runs"] if r.get("final_loss") is not None}
    both = [r for r in result["runs"] if r["name"] in theirs and r.get("final_loss") is not None]
    if not both or not dp or not odp:
        return []
    lines = ["", "Side by side with `%s` (data: %s):" % (other_name, data_text(other)), "",
             "| configuration | final eval loss | gap to DP | final eval loss in %s | gap to its DP | loss here / there |"
             % other_name,
             "|---|---|---|---|---|---|"]
    for r in both:
        o = theirs[r["name"]]
        lines.append("| %s | %.4f | %+.1f%% | %.4f | %+.1f%% | %+.1f%% |" % (
            r["name"], r["final_loss"], gap(r["final_loss"], dp["final_loss"]), o["final_loss"],
            gap(o["final_loss"], odp["final_loss"]), gap(r["final_loss"], o["final_loss"])))
    return lines


def first_at(r, loss):
    """The first curve point of r at or below loss, or None."""
    return next((e for e in r["curve"] if e["loss"] <= loss), None)


def straggler_table(result):
    """Runs with a straggler (_slowS): for each sync one as the reference, every straggler run's wall
    seconds and load-free model time (a fast step 1 unit, the straggler's S) to the reference's final
    loss, as a share of the reference's own (the commit of each version, from the workers' start), and
    the wall milliseconds one model unit took (equal in every row when the machine treats them alike)."""
    slow = [r for r in result["runs"] if r.get("slow") and r.get("curve")]
    lines = []
    for ref in [r for r in slow if r.get("mode", "sync") == "sync"]:
        end = ref["curve"][-1]
        if "seconds" not in end:
            continue
        lines += ["", "Time to `%s`'s final loss %.4f (its last commit: %.1f s, %s model units):" % (
            ref["name"], ref["final_loss"], end["seconds"], "%g" % end["model_units"] if "model_units" in end else "-"),
            "", "| configuration | final eval loss | tokens | load average (mean, max) | wall s to the end | "
            "wall s to the target (share) | model units to the end | model units to the target (share) | "
            "wall ms per unit |", "|---|---|---|---|---|---|---|---|---|"]
        for r in slow:
            hit, last = first_at(r, ref["final_loss"]), r["curve"][-1]
            ld = r.get("load_average")

            def share(key, e):
                if not e or key not in e:
                    return "never" if not e else "-"
                return "%g (%.0f%%)" % (e[key], 100.0 * e[key] / end[key]) if end.get(key) else "%g" % e[key]
            per_unit = "%.1f" % (1000.0 * last["seconds"] / last["model_units"]) \
                if last.get("seconds") and last.get("model_units") else "-"
            lines.append("| %s | %.4f | %d | %s | %s | %s | %s | %s | %s |" % (
                r["name"], r["final_loss"], r["tokens"], "%.1f, %.1f" % (ld["mean"], ld["max"]) if ld else "-",
                "%g" % last["seconds"] if "seconds" in last else "-", share("seconds", hit),
                "%g" % last["model_units"] if "model_units" in last else "-", share("model_units", hit), per_unit))
    return lines


def finish_report(out, result, lines, headline, compare=None):
    lines += straggler_table(result)
    lines += ["", "Wall time per configuration (training only): " + ", ".join(
        "%s %.0f s" % (r["name"], r["train_seconds"]) for r in result["runs"] if not r.get("build")) + "."]
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plots(out, result, headline, compare)
    return "\n".join(lines)


def best_per_h(result):
    """[(H, the sync single-fragment run with the lowest final loss at that H)]"""
    out = []
    for h in sorted({r["H"] for r in result["runs"] if r.get("kind") == "diloco"}):
        runs = [r for r in result["runs"] if r.get("kind") == "diloco" and r["H"] == h and
                r.get("mode", "sync") == "sync" and r.get("fragments", 1) == 1 and r.get("group", 1) == 1 and
                r.get("final_loss") is not None]
        if runs:
            out.append((h, min(runs, key=lambda r: r["final_loss"])))
    return out


def plots(out, result, headline="", compare=None):
    """loss_vs_tokens.png (DP, the main table's runs, H = 50 variants) and final_vs_h.png (every group
    of sync runs with the same settings tried at three H or more, against the DP runs)."""
    if not shutil.which("gnuplot"):
        print("gnuplot not found (apt-get install gnuplot-nox): no plots", file=sys.stderr)
        return
    res = {r["name"]: r for r in result["runs"]}
    dp = best_dp(result)
    if not dp:
        return
    dps = [dp] + ([res["dp"]] if "dp" in res and res["dp"] is not dp else [])
    names = [r["name"] for r in dps]
    names += [r["name"] for r in headline_runs(result, headline)]
    # H = 50 variants: async and Streaming at the tuned inner lr where they were run, else the first sweep's
    variants = ["h50_lr0.7_m0.9"]
    for new, old in (("h50_lr0.7_m0.5_ilr0.012_async_dn4", "h50_async_dn_m0.5"),
                     ("h50_lr1_m0.5_ilr0.012_f4", "h50_stream_f4")):
        variants.append(new if new in res else old)
    names += [n for n in variants if n in res and n not in names]
    if result.get("plot"):  # bench/quality --report --plot NAMES: the DP runs and exactly these
        names = [r["name"] for r in dps] + [n for n in result["plot"] if n in res]
    for n in names:
        with open(os.path.join(out, "curve_%s.dat" % n), "w") as f:
            for e in res[n]["curve"]:
                f.write("%d %.6f\n" % (e["tokens"], e["loss"]))
    series = ", ".join("'%s/curve_%s.dat' using ($1/1e6):2 with linespoints title '%s'" % (
        out, n, "data-parallel, inner lr %g" % inner_lr(result, res[n]) if res[n].get("kind") == "dp" else n)
        for n in names)
    gp = ["set terminal pngcairo noenhanced size 900,560 font ',10'",
          "set output '%s/loss_vs_tokens.png'" % out, "set xlabel 'tokens (millions)'",
          "set ylabel 'validation loss (nats/token)'", "set key top right", "set grid",
          "set title 'Validation loss of the global model vs tokens'", "set yrange [*:3.6]",
          "plot " + series]
    groups = {}
    for r in result["runs"]:
        if r.get("kind") == "diloco" and r.get("mode", "sync") == "sync" and r.get("fragments", 1) == 1:
            groups.setdefault((r["lr"], r["mu"], inner_lr(result, r), r.get("nesterov", True)), []).append(r)
    plot = []
    for i, ((lr, mu, ilr, nest), runs) in enumerate(sorted(groups.items())):
        if len({r["H"] for r in runs}) < 3:
            continue
        with open(os.path.join(out, "final_vs_h_%d.dat" % i), "w") as f:
            for r in sorted(runs, key=lambda r: r["H"]):
                f.write("%d %.6f\n" % (r["H"], r["final_loss"]))
        plot.append("'%s/final_vs_h_%d.dat' using 1:2 with linespoints title 'DiLoCo %d workers, outer lr %g, momentum "
                    "%g%s, inner lr %g'" % (out, i, result["workers"], lr, mu, "" if nest else " plain", ilr))
    best = [r for _, r in best_per_h(result)]
    if len(best) >= 3:
        with open(os.path.join(out, "final_vs_h_best.dat"), "w") as f:
            for r in best:
                f.write("%d %.6f\n" % (r["H"], r["final_loss"]))
        plot.append("'%s/final_vs_h_best.dat' using 1:2 with linespoints linewidth 3 title 'DiLoCo, the best settings "
                    "found at each H (%s parts)'" % (out, layout(result)))
    theirs = [r for _, r in best_per_h(compare[1])] if compare else []
    if len(theirs) >= 3:
        with open(os.path.join(out, "final_vs_h_compare.dat"), "w") as f:
            for r in theirs:
                f.write("%d %.6f\n" % (r["H"], r["final_loss"]))
        plot.append("'%s/final_vs_h_compare.dat' using 1:2 with linespoints linewidth 3 dashtype 3 title 'the best at "
                    "each H in %s (%s parts)'" % (out, compare[0], layout(compare[1])))
    for r in dps:
        plot.append("%f with lines dashtype 2 title 'data-parallel, inner lr %g'" % (r["final_loss"],
                                                                                      inner_lr(result, r)))
    gp += ["set output '%s/final_vs_h.png'" % out, "set logscale x", "set xlabel 'H (inner steps per sync)'",
           "set title 'Final validation loss vs H (equal tokens)'", "set yrange [*:*]", "set key top center",
           "plot " + ", ".join(plot)]
    r = subprocess.run(["gnuplot"], input="\n".join(gp) + "\n", text=True, capture_output=True)
    if r.returncode:
        print("gnuplot: " + r.stderr.strip(), file=sys.stderr)
