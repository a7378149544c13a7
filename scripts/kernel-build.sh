#!/usr/bin/env bash
# Runs inside the sysroot (see scripts/kernel.sh): prepares the overlaid source tree and builds.
set -euo pipefail
deb=$1
# A variant (e.g. "kasan") builds in build-VARIANT with kernel/configs/VARIANT.config on top.
variant=${2:-}
src=/ferrdma/src
cache=/ferrdma/cache/kernel
. "$src/scripts/lib.sh"
mkdir -p "$cache"

# 1. The source tree: a pristine copy of the package (never modified) and a working copy with
#    our patches. When the patch set changes, only the files the old and new patches touch are
#    restored from the pristine copy and re-patched, so the build directory stays valid.
debkey=$(basename "$deb" | sha256sum | cut -c1-16)
pristine="$cache/pristine-$debkey"
tree="$cache/src"
if [ ! -f "$pristine/.ferrdma-ready" ]; then
	log "kernel: unpacking $(basename "$deb")"
	rm -rf "$cache"/pristine-* "$tree" "$cache/build"
	mkdir -p "$pristine.tmp"
	dpkg-deb --fsys-tarfile "$deb" | tar -xO --wildcards './usr/src/linux-source-*.tar.xz' \
		| tar -xJ -C "$pristine.tmp" --strip-components=1
	touch "$pristine.tmp/.ferrdma-ready"
	mv "$pristine.tmp" "$pristine"
fi
if [ ! -f "$tree/.ferrdma-ready" ]; then
	log "kernel: copying the source tree"
	rm -rf "$tree" "$cache/build"
	cp -a "$pristine" "$tree"
	rm -f "$tree/.ferrdma-ready"
	: > "$tree/.ferrdma-patched-files"
	touch "$tree/.ferrdma-ready"
fi
patchkey=$(cat "$src"/scripts/kernel-patches/*.patch | sha256sum | cut -c1-16)
if [ "$(cat "$tree/.ferrdma-patch-key" 2>/dev/null)" != "$patchkey" ]; then
	files=$( (cat "$tree/.ferrdma-patched-files"; \
		sed -n 's|^+++ b/||p' "$src"/scripts/kernel-patches/*.patch) | sort -u)
	# The patched files as they were, to give back their mtimes where the new patch set
	# leaves their contents alone: a new patch for one file then rebuilds what depends on
	# that file, not everything behind rust/bindings_helper.h or a Kconfig.
	before="$cache/patched-before"
	rm -rf "$before"
	for f in $files; do
		if [ -f "$tree/$f" ]; then mkdir -p "$before/$(dirname "$f")" && cp -p "$tree/$f" "$before/$f"; fi
		if [ -f "$pristine/$f" ]; then cp "$pristine/$f" "$tree/$f"; else rm -f "$tree/$f"; fi
	done
	for p in "$src"/scripts/kernel-patches/*.patch; do
		log "kernel: applying $(basename "$p")"
		patch -s -d "$tree" -p1 < "$p"
	done
	for f in $files; do
		if [ -f "$before/$f" ] && cmp -s "$before/$f" "$tree/$f"; then touch -r "$before/$f" "$tree/$f"; fi
	done
	rm -rf "$before"
	sed -n 's|^+++ b/||p' "$src"/scripts/kernel-patches/*.patch | sort -u > "$tree/.ferrdma-patched-files"
	echo "$patchkey" > "$tree/.ferrdma-patch-key"
fi

# 2. Overlay our files. --checksum leaves unchanged files (and their mtimes) alone, so make
#    rebuilds only what really changed.
for d in drivers rust include kernel samples; do
	[ -d "$src/$d" ] && rsync -rc "$src/$d/" "$tree/$d/"
done

# 3. Configure: allnoconfig + kvm_guest + our fragment; redone only when the fragment changes.
build="$cache/build${variant:+-$variant}"
fragments=(ferrdma.config ${variant:+"$variant.config"})
[ -z "$variant" ] || [ -f "$src/kernel/configs/$variant.config" ] || die "no kernel/configs/$variant.config"
mkdir -p "$build"
mk=(make -C "$tree" O="$build" ARCH=x86_64 LLVM=-19 -j"$(nproc)")
ckey=$( (cd "$src/kernel/configs" && cat "${fragments[@]}") | sha256sum | cut -c1-16)
if [ "$(cat "$build/.ferrdma-config-key" 2>/dev/null)" != "$ckey" ] || [ ! -f "$build/.config" ]; then
	log "kernel: configuring $build (allnoconfig + kvm_guest.config + ${fragments[*]})"
	"${mk[@]}" -s allnoconfig >/dev/null
	"${mk[@]}" -s kvm_guest.config "${fragments[@]}" >/dev/null
	# Every option of our fragments must have survived Kconfig's dependency resolution; where
	# a later fragment sets an option again (a variant turning something off), its value counts.
	bad=0
	while IFS= read -r line; do
		case "$line" in
		CONFIG_*=*) sym=${line%%=*}; want=${line#*=}
			if [ "$want" = n ]; then
				grep -qx "$sym=[ym]" "$build/.config" && { echo "kernel config: $sym should be off" >&2; bad=1; }
			else
				grep -qx "$line" "$build/.config" || { echo "kernel config: wanted $line, got '$(grep "^$sym=\|# $sym " "$build/.config")'" >&2; bad=1; }
			fi ;;
		"# CONFIG_"*" is not set") sym=${line#\# }; sym=${sym%% *}
			grep -qx "$sym=[ym]" "$build/.config" && { echo "kernel config: $sym should be off" >&2; bad=1; } ;;
		esac
	done < <(cd "$src/kernel/configs" && cat "${fragments[@]}" | awk '
		match($0, /^(# )?CONFIG_[A-Za-z0-9_]+/) {
			sym = substr($0, RSTART, RLENGTH); sub(/^# /, "", sym)
			if (!(sym in line)) order[++n] = sym
			line[sym] = $0
		}
		END { for (i = 1; i <= n; i++) print line[order[i]] }')
	[ "$bad" = 0 ] || die "kernel config fragment did not apply (see above); is Rust available? try: make -C $tree O=$build LLVM=-19 rustavailable"
	echo "$ckey" > "$build/.ferrdma-config-key"
fi

# 4. Build, with a progress line every 30 seconds.
log "kernel: building bzImage and modules in $build (cold: ~18 min on 2 cores, ~25 with the ULPs; log: $build/build.log)"
start=$(date +%s)
set +e
# The kernel first, then the modules: a broken driver must not leave us without a bootable image.
{ "${mk[@]}" bzImage && "${mk[@]}" modules; } > "$build/build.log" 2>&1 &
pid=$!
next=$((start + 30))
while kill -0 "$pid" 2>/dev/null; do
	sleep 2
	now=$(date +%s)
	if [ "$now" -ge "$next" ]; then
		next=$((now + 30))
		log "kernel: $(( now - start ))s, $(grep -c '^  [A-Z]' "$build/build.log") steps, last: $(grep '^  [A-Z]' "$build/build.log" | tail -1 | sed 's/^ *//')"
	fi
done
wait "$pid"; rc=$?
set -e
if [ "$rc" != 0 ]; then
	grep -m40 -E 'error|Error|warning:' "$build/build.log" >&2
	tail -20 "$build/build.log" >&2
	die "kernel build failed (full log: $build/build.log)"
fi
# 5. The modules installed with their modules.dep in $build/modroot, for modprobe in the guest
#    (guest/ulp.sh ulp_modprobe: the ULP tests load chains of modules, and the kernel's
#    own request_module, e.g. for crypto algorithms, needs modprobe to find them).
rm -rf "$build/modroot"
"${mk[@]}" -s modules_install INSTALL_MOD_PATH="$build/modroot" >> "$build/build.log" 2>&1 \
	|| die "modules_install failed (full log: $build/build.log)"
log "kernel: built in $(( $(date +%s) - start ))s"
