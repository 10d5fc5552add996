# Install VRAM Steward for the current user: copy the PyInstaller bundle to
# %LOCALAPPDATA%\Programs\VRAM Steward and add a Start Menu shortcut to it.
#
#   powershell -ExecutionPolicy Bypass -File packaging\windows\install.ps1 [-Bundle DIR]
#   powershell -ExecutionPolicy Bypass -File packaging\windows\install.ps1 -Uninstall
#
# DIR defaults to dist\vram-steward (made by: py packaging\build.py).
# Settings (%APPDATA%\vram-steward) are kept on uninstall.
param(
    [string]$Bundle = (Join-Path $PSScriptRoot "..\..\dist\vram-steward"),
    [switch]$Uninstall
)
$ErrorActionPreference = "Stop"

$Target = Join-Path $env:LOCALAPPDATA "Programs\VRAM Steward"
$Shortcut = Join-Path ([Environment]::GetFolderPath("Programs")) "VRAM Steward.lnk"
$Exe = Join-Path $Target "vram-steward.exe"

if ($Uninstall) {
    Remove-Item -LiteralPath $Shortcut -Force -ErrorAction SilentlyContinue
    if (Test-Path -LiteralPath $Exe) { Remove-Item -LiteralPath $Target -Recurse -Force }
    Write-Host "Uninstalled VRAM Steward"
    return
}

if (-not (Test-Path -LiteralPath (Join-Path $Bundle "vram-steward.exe"))) {
    throw "No bundle in ${Bundle}: build it with  py packaging\build.py"
}
if (Test-Path -LiteralPath $Target) {
    if (-not (Test-Path -LiteralPath $Exe)) { throw "$Target holds no VRAM Steward; not replacing it" }
    Remove-Item -LiteralPath $Target -Recurse -Force
}
New-Item -ItemType Directory -Force -Path $Target | Out-Null
Copy-Item -Path (Join-Path $Bundle "*") -Destination $Target -Recurse

$Link = (New-Object -ComObject WScript.Shell).CreateShortcut($Shortcut)
$Link.TargetPath = $Exe
$Link.WorkingDirectory = $Target
$Link.IconLocation = "$Exe,0"
$Link.Description = "See which processes hold your GPU memory, live"
$Link.Save()
Write-Host "Installed $Target; Start Menu: VRAM Steward"
