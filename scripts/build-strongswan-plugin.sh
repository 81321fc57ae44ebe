#!/usr/bin/env bash
# build-strongswan-plugin.sh: build contrib/strongswan's charon plugin (kernel-vecgate)
# for the strongSwan installed on this machine (Debian 12, as root), and print the path
# of libstrongswan-kernel-vecgate.so as the last line of stdout.
#
# The plugin is compiled against the headers of the exact Debian source of the installed
# libstrongswan. deb-src is not configured on these machines, so the source is fetched
# with a private sources list, lists directory and cache: the system's apt state is not
# touched. strongSwan is configured only far enough to produce config.h; nothing else of
# it is built. Headers and the .so are cached in ~/.cache/vecgate-strongswan/<version>/,
# so a second run takes a second (the .so is rebuilt when the plugin's sources change).
#
# Loading it: strongSwan 5.9.8 has no strongswan.conf option for extra plugin
# directories, so either copy the .so into /usr/lib/ipsec/plugins, or start charon with
# LD_PRELOAD=<the .so> (charon then finds kernel_vecgate_plugin_create in the process).
# Either way list kernel-vecgate in charon.load before kernel-netlink.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../contrib/strongswan" && pwd)
FILES=(kernel_vecgate_plugin.c kernel_vecgate_plugin.h kernel_vecgate_ipsec.c kernel_vecgate_ipsec.h)
PLUGIN_CFLAGS=(-O2 -g -Wall -Wno-format -Wno-pointer-sign -Wno-unused-parameter -fPIC -shared)

step="starting"
log=""
fail() {
    echo "build-strongswan-plugin.sh: FAILED while $step" >&2
    if [ -n "$log" ] && [ -s "$log" ]; then
        echo "--- last lines of $log:" >&2
        tail -25 "$log" >&2
    fi
}
trap fail ERR
say() { echo "build-strongswan-plugin.sh: $*" >&2; }

step="checking for root"
[ "$(id -u)" = 0 ] || { say "needs root (apt-get)"; false; }

step="reading the installed strongSwan version (dpkg-query libstrongswan)"
version=$(dpkg-query -W -f='${Version}' libstrongswan 2>/dev/null) && [ -n "$version" ] \
    || { say "libstrongswan is not installed (apt-get install strongswan-charon)"; false; }
step="checking for charon's libraries"
[ -e /usr/lib/ipsec/libcharon.so.0 ] && [ -e /usr/lib/ipsec/libstrongswan.so.0 ] \
    || { say "/usr/lib/ipsec/libcharon.so.0 missing (apt-get install strongswan-libcharon)"; false; }
upstream=${version#*:}; upstream=${upstream%-*}

root=${XDG_CACHE_HOME:-$HOME/.cache}/vecgate-strongswan
cache=$root/$version
so=$cache/libstrongswan-kernel-vecgate.so
mkdir -p "$cache"
exec 9> "$root/.lock"
flock 9    # two runs at once would configure into the same cache

# what the .so is built from: our sources and the compiler flags
stamp=$( (cd "$SRC" && cat "${FILES[@]}"; echo "${PLUGIN_CFLAGS[*]}") | sha256sum | cut -d' ' -f1)
if [ -e "$so" ] && [ "$(cat "$cache/so.stamp" 2>/dev/null)" = "$stamp" ]; then
    say "cached for strongSwan $version"
    echo "$so"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=$tmp/build.log

if ! [ -e "$cache/include/config.h" ]; then
    step="installing build tools with apt-get"
    need=()
    command -v gcc >/dev/null || need+=(gcc libc6-dev)
    command -v make >/dev/null || need+=(make)
    command -v pkg-config >/dev/null || need+=(pkg-config)
    command -v bzip2 >/dev/null || need+=(bzip2)
    command -v xz >/dev/null || need+=(xz-utils)
    command -v dpkg-source >/dev/null || need+=(dpkg-dev)
    if [ ${#need[@]} -gt 0 ]; then
        say "installing ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >> "$log" 2>&1
        apt-get install -y -qq --no-install-recommends "${need[@]}" >> "$log" 2>&1
    fi

    step="downloading Debian's source of strongswan $version"
    say "fetching strongswan $version source from Debian"
    mkdir -p "$tmp/apt/lists/partial" "$tmp/apt/cache/archives/partial" "$tmp/dl"
    cat > "$tmp/apt/sources.list" <<'EOF'
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm-updates main
deb-src http://deb.debian.org/debian-security bookworm-security main
EOF
    # private sources, lists and caches: the system's apt state stays as it is
    APT=(apt-get -q -o Dir::Etc::SourceList="$tmp/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
         -o Dir::State::Lists="$tmp/apt/lists" -o Dir::Cache="$tmp/apt/cache"
         -o APT::Sandbox::User=root)
    "${APT[@]}" update >> "$log" 2>&1
    step="downloading Debian's source of strongswan $version (apt-get source)"
    if (cd "$tmp/dl" && "${APT[@]}" source --download-only "strongswan=$version") >> "$log" 2>&1; then
        step="unpacking strongswan_$version.dsc (dpkg-source -x)"
        (cd "$tmp/dl" && dpkg-source -x ./*.dsc "$tmp/strongswan") >> "$log" 2>&1
    else
        # apt checks each file against the Sources index on its own, so the upstream
        # tarball it did get is the one this Debian version is built from; only
        # Debian's patches (security fixes in .c files so far) are missing then
        orig=$(ls "$tmp/dl"/strongswan_"$upstream".orig.tar.* 2>/dev/null | grep -v '\.asc$' | head -1 || true)
        [ -n "$orig" ] || { say "neither strongswan $version nor its upstream tarball could be downloaded"; false; }
        say "WARNING: the mirror did not serve all of strongswan $version's source"
        say "WARNING: building against $(basename "$orig") (verified by apt) without Debian's patches"
        step="unpacking $(basename "$orig")"
        mkdir -p "$tmp/strongswan"
        tar -xf "$orig" -C "$tmp/strongswan" --strip-components=1
    fi

    step="configuring strongswan $upstream (for config.h only)"
    say "configuring strongswan $upstream for its headers (half a minute)"
    # no plugins: we only need config.h, which describes this libc/compiler
    (cd "$tmp/strongswan" && ./configure --disable-defaults --enable-charon --disable-static) >> "$log" 2>&1

    step="caching the headers"
    rm -rf "$cache/include.new"
    mkdir -p "$cache/include.new"
    cp "$tmp/strongswan/config.h" "$cache/include.new/"
    (cd "$tmp/strongswan/src" && find libstrongswan libcharon -name '*.h' -print0 \
        | xargs -0 cp --parents -t "$cache/include.new")
    rm -rf "$cache/include"
    mv "$cache/include.new" "$cache/include"
fi

step="compiling the plugin"
say "compiling kernel-vecgate against strongSwan $version"
inc=$cache/include
# linked like Debian's own plugins (libcharon, libstrongswan); the runpath lets the .so
# be loaded with LD_PRELOAD from outside /usr/lib/ipsec as well
gcc "${PLUGIN_CFLAGS[@]}" -include "$inc/config.h" -I"$inc/libstrongswan" -I"$inc/libcharon" \
    -o "$tmp/plugin.so" "$SRC/kernel_vecgate_plugin.c" "$SRC/kernel_vecgate_ipsec.c" \
    -L/usr/lib/ipsec -l:libcharon.so.0 -l:libstrongswan.so.0 -Wl,-rpath,/usr/lib/ipsec -Wl,-z,defs \
    >> "$log" 2>&1
mv "$tmp/plugin.so" "$so"
echo "$stamp" > "$cache/so.stamp"
say "built for strongSwan $version"
echo "$so"
