#!/usr/bin/env bash
# The engine's layers, checked on the sources: no file of an engine folder includes a folder that
# docs/architecture.md puts above it (the per-folder CMake libraries catch calls; this catches
# header-only uses too). Usage: check_layers.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: check_layers.sh SOURCE_DIR}
# folder -> the engine folders it may include (besides itself), as engine/CMakeLists.txt links them
declare -A allowed=(
  [util]=""
  [layout]=""
  [config]="layout util"
  [planner]="config layout util"
  [telemetry]="config layout util"
  [ops]="telemetry config layout util"
  [parallel]="ops telemetry config layout util"
  [memory]="ops telemetry config layout util"
  [model]="memory parallel ops telemetry config layout util"
  [train]="model memory parallel ops telemetry planner config layout util"
)
bad=0
for folder in "${!allowed[@]}"; do
  [ -d "$root/engine/$folder" ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(sed -E 's|.*#include "engine/([a-z_]+)[/.].*|\1|' <<<"$line")
    [ "$target" = "$folder" ] && continue
    if [[ " ${allowed[$folder]} " != *" $target "* ]]; then
      echo "layer violation: ${file#$root/} includes engine/$target (engine/$folder may include: ${allowed[$folder]:-nothing})"
      bad=1
    fi
  done < <(grep -rHE '#include "engine/[a-z_]+[/.]' "$root/engine/$folder" --include='*.h' --include='*.cpp' || true)
done
[ "$bad" = 0 ] && echo "engine layers: every include points down"
exit "$bad"
