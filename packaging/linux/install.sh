#!/bin/sh
# Install VRAM Steward for the current user, so it is in the applications menu
# and starts with a double click.
#
#   packaging/linux/install.sh [BUNDLE_DIR]   the PyInstaller bundle (default: dist/vram-steward,
#                                             made by: python packaging/build.py)
#   packaging/linux/install.sh --from-source  this checkout, run by its .venv/bin/python
#
# The bundle is copied to ~/.local/opt/vram-steward (VRAM_STEWARD_PREFIX overrides)
# and linked as ~/.local/bin/vram-steward; the menu entry, icons and AppStream
# metadata go under ${XDG_DATA_HOME:-~/.local/share}.  uninstall.sh undoes it.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
data=${XDG_DATA_HOME:-$HOME/.local/share}
prefix=${VRAM_STEWARD_PREFIX:-$HOME/.local/opt/vram-steward}
bindir=$HOME/.local/bin
metainfo=io.github.vram_steward.vram_steward.metainfo.xml

die() { echo "install.sh: $*" >&2; exit 1; }

# One Exec= argument, quoted as the Desktop Entry spec asks when it holds
# reserved characters; backslashes are then doubled once more for the string
# escape that applies before unquoting, and % becomes %%.
exec_arg() {
    case $1 in
        *[!A-Za-z0-9/._+,:@-]*)
            printf '"%s"' "$(printf '%s' "$1" | sed -e 's/[\\"`$]/\\&/g' -e 's/\\/\\\\/g')" ;;
        *) printf '%s' "$1" ;;
    esac | sed 's/%/%%/g'
}

if [ "${1:-}" = "--from-source" ]; then
    python=$repo/.venv/bin/python
    [ -x "$python" ] || die "no $python: create the virtualenv first (see README)"
    exec_line="$(exec_arg "$python") $(exec_arg "$repo/main.py")"
else
    bundle=${1:-$repo/dist/vram-steward}
    [ -x "$bundle/vram-steward" ] || die "no bundle in $bundle: build it with python packaging/build.py"
    bundle=$(cd "$bundle" && pwd -P)
    if [ -e "$prefix" ]; then
        [ -x "$prefix/vram-steward" ] || die "$prefix exists but holds no VRAM Steward; not replacing it"
        [ "$(cd "$prefix" && pwd -P)" != "$bundle" ] || die "$bundle is already the installed copy"
        rm -rf "$prefix"
    fi
    mkdir -p "$(dirname "$prefix")"
    cp -RP "$bundle" "$prefix"
    exec_line=$(exec_arg "$prefix/vram-steward")

    # A terminal command too, unless something else already owns the name.
    mkdir -p "$bindir"
    link=$bindir/vram-steward
    if [ ! -e "$link" ] && [ ! -L "$link" ] || [ "$(readlink "$link")" = "$prefix/vram-steward" ]; then
        ln -sfn "$prefix/vram-steward" "$link"
    else
        echo "install.sh: kept the existing $link" >&2
    fi
fi

mkdir -p "$data/applications" "$data/metainfo"
EXEC=$exec_line awk '/^Exec=/ { print "Exec=" ENVIRON["EXEC"]; next } { print }' \
    "$here/vram-steward.desktop" > "$data/applications/vram-steward.desktop"
cp "$here/$metainfo" "$data/metainfo/$metainfo"
for size in 16 24 32 48 64 128 256 512; do
    dir=$data/icons/hicolor/${size}x$size/apps
    mkdir -p "$dir"
    cp "$repo/resources/icons/vram-steward-$size.png" "$dir/vram-steward.png"
done
mkdir -p "$data/icons/hicolor/scalable/apps"
cp "$repo/resources/icons/vram-steward.svg" "$data/icons/hicolor/scalable/apps/vram-steward.svg"

# Refresh the desktop's caches; a missing tool or a failure only delays the menu.
if command -v update-desktop-database >/dev/null 2>&1; then
    update-desktop-database -q "$data/applications" 2>/dev/null || true
fi
# Only refresh an existing icon cache: a new one would go stale when other apps add icons.
if [ -f "$data/icons/hicolor/icon-theme.cache" ] && command -v gtk-update-icon-cache >/dev/null 2>&1; then
    gtk-update-icon-cache -q -t "$data/icons/hicolor" 2>/dev/null || true
fi

printf 'Installed %s\nExec=%s\n' "$data/applications/vram-steward.desktop" "$exec_line"
