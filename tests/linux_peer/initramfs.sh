# shellcheck shell=bash
# What every Linux-peer guest's initramfs holds, built the same way for each
# (prepare.sh, prepare-esp.sh, prepare-lb.sh, prepare-sctp.sh, prepare-sctp-dsr.sh):
# the kernel modules a guest loads with their dependencies, busybox, Debian's `ip` with
# its libraries, one static test program and the guest's init script. Sourced; run in $OUT with the kernel unpacked in
# kpkg/ (prepare.sh).

# initramfs ROOT OUT.gz INIT PROGRAM.c "MODULE..."
#   ROOT: the folder built (emptied first); OUT.gz: the gzipped cpio written; INIT: the
#   script the guest runs as /init; PROGRAM.c: compiled static to /sbin/PROGRAM;
#   MODULES: names, each with what it depends on (a built-in one adds nothing).
initramfs() {
    local R=$1 out=$2 init=$3 program=$4 modules=$5
    local kv
    kv=$(ls kpkg/lib/modules | head -n1)
    rm -rf "$R"
    mkdir -p "$R"/{bin,sbin,proc,sys,dev,tmp,run,etc,lib/modules/"$kv",lib64,lib/x86_64-linux-gnu}
    local m
    for m in $modules; do
        # Built-in ones print no insmod line.
        modprobe -d kpkg -S "$kv" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}' || true
    done | sort -u | while read -r f; do
        rel=${f#"$OUT/kpkg/"}
        mkdir -p "$R/$(dirname "$rel")"
        cp "$f" "$R/$rel"
    done
    cp kpkg/lib/modules/"$kv"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$kv/" 2>/dev/null || true
    depmod -b "$R" "$kv"
    cp /bin/busybox "$R/bin/busybox"
    local a
    for a in $(/bin/busybox --list); do [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"; done
    # busybox's own `ip` lacks fou, encap and xfrm options: Debian's iproute2 with its libraries.
    rm -f "$R/bin/ip"
    cp "$(command -v ip)" "$R/sbin/ip"
    local l
    for l in $(ldd "$(command -v ip)" | awk '/=>/{print $3} /ld-linux/{print $1}'); do cp -L "$l" "$R$l"; done
    ln -sf ../bin/busybox "$R/sbin/modprobe"
    cc -O2 -static -o "$R/sbin/$(basename "$program" .c)" "$program"
    cp "$init" "$R/init"
    chmod +x "$R/init"
    (cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) >"$out"
}

# guest_initrd NAME INIT PROGRAM.c "MODULE..." WHAT
#   One test's guest on prepare.sh's kernel (run first): target/linux-peer/initrd-NAME.gz
#   built by `initramfs` unless it is newer than INIT, PROGRAM.c, the calling script and
#   this file; then "linux WHAT peer ready: DIR (kernel VERSION)". Run from a
#   prepare-*.sh that set HERE to its folder.
guest_initrd() {
    local name=$1 init=$2 program=$3 modules=$4 what=$5
    "$HERE/prepare.sh" >/dev/null
    # `initramfs` reads OUT.
    OUT="${LINUX_PEER_DIR:-$HERE/../../target/linux-peer}"
    OUT="$(cd "$OUT" && pwd -P)"
    cd "$OUT"
    local out=initrd-$name.gz fresh=yes f
    for f in "$init" "$program" "$0" "$HERE/initramfs.sh"; do
        [ -f "$out" ] && [ "$out" -nt "$f" ] || fresh=no
    done
    [ $fresh = yes ] || initramfs "$OUT/root-$name" "$out" "$init" "$program" "$modules"
    echo "linux $what peer ready: $OUT (kernel $(ls kpkg/lib/modules | head -n1))"
}
