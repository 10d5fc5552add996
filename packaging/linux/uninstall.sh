#!/bin/sh
# Remove what install.sh put in place (same VRAM_STEWARD_PREFIX and XDG_DATA_HOME).
# Settings (~/.config/vram-steward) are kept.
set -eu

data=${XDG_DATA_HOME:-$HOME/.local/share}
prefix=${VRAM_STEWARD_PREFIX:-$HOME/.local/opt/vram-steward}
link=$HOME/.local/bin/vram-steward
autostart=${XDG_CONFIG_HOME:-$HOME/.config}/autostart/vram-steward.desktop
metainfo=io.github.vram_steward.vram_steward.metainfo.xml

rm -f "$data/applications/vram-steward.desktop" "$data/metainfo/$metainfo" \
    "$data/icons/hicolor/scalable/apps/vram-steward.svg"
for size in 16 24 32 48 64 128 256 512; do
    rm -f "$data/icons/hicolor/${size}x$size/apps/vram-steward.png"
done

if [ -L "$link" ] && [ "$(readlink "$link")" = "$prefix/vram-steward" ]; then
    rm -f "$link"
fi
# "Start at login" would otherwise keep launching a program that is gone.
if [ -f "$autostart" ] && grep -qF "$prefix/" "$autostart"; then
    rm -f "$autostart"
fi
if [ -x "$prefix/vram-steward" ]; then
    rm -rf "$prefix"
fi

if command -v update-desktop-database >/dev/null 2>&1; then
    update-desktop-database -q "$data/applications" 2>/dev/null || true
fi
if [ -f "$data/icons/hicolor/icon-theme.cache" ] && command -v gtk-update-icon-cache >/dev/null 2>&1; then
    gtk-update-icon-cache -q -t "$data/icons/hicolor" 2>/dev/null || true
fi
echo "Uninstalled VRAM Steward"
