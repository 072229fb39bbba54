#!/bin/sh
# embed.sh NAME FILE: print a C file that defines `const char NAME[]` holding FILE's bytes (NUL-terminated)
# and `const unsigned long NAME_len`. Used to compile the Functions library (build/diloco.lua, joined from lua/) into every binary, so a process
# always loads exactly the function library it was built with.
set -e
name=$1; file=$2
printf '/* generated from %s by tools/embed.sh; do not edit */\n' "$file"
printf 'const char %s[] = {\n' "$name"
od -An -v -tx1 "$file" | sed -e 's/ *$//' -e 's/^ *//' -e 's/ \{1,\}/, 0x/g' -e 's/^/0x/' -e 's/$/,/'
printf '0x00 };\nconst unsigned long %s_len = sizeof(%s) - 1;\n' "$name" "$name"
