"""How far apart two colours look: CIELAB, CIEDE2000 and a simulated deuteranopia.

Pure Python (no colour library): the palette's tests measure every pair of plot
colours with it, for normal colour vision and for deuteranopia, so a colour that
only looks apart from its neighbours to some viewers cannot slip into the palette.

* sRGB (D65) to CIELAB: IEC 61966-2-1 transfer curve, the sRGB→XYZ matrix, the CIE
  Lab formulas with the D65 white.
* :func:`delta_e_2000`: CIEDE2000 (Sharma, Wu & Dalal 2005), k_L = k_C = k_H = 1.
* :func:`deutan`: Machado, Oliveira & Fernandes (2009), deuteranopia at severity
  1.0, applied to linear RGB and clipped to the sRGB gamut.
"""

from __future__ import annotations

import math

RGB = tuple[float, float, float]  # each 0..1
Lab = tuple[float, float, float]

# Machado et al. 2009, deuteranomaly at severity 1.0 (= deuteranopia), linear RGB.
DEUTAN_MATRIX: tuple[RGB, RGB, RGB] = (
    (0.367322, 0.860646, -0.227968),
    (0.280085, 0.672501, 0.047413),
    (-0.011820, 0.042940, 0.968881),
)

_SRGB_TO_XYZ: tuple[RGB, RGB, RGB] = (
    (0.4124564, 0.3575761, 0.1804375),
    (0.2126729, 0.7151522, 0.0721750),
    (0.0193339, 0.1191920, 0.9503041),
)
_WHITE_D65: RGB = (0.95047, 1.0, 1.08883)


def parse_hex(color: str) -> RGB:
    """"#RRGGBB" as three 0..1 channels."""
    text = color.lstrip("#")
    if len(text) != 6:
        raise ValueError(f"not #RRGGBB: {color!r}")
    return (int(text[0:2], 16) / 255, int(text[2:4], 16) / 255, int(text[4:6], 16) / 255)


def to_linear(rgb: RGB) -> RGB:
    def lin(v: float) -> float:
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
    return (lin(rgb[0]), lin(rgb[1]), lin(rgb[2]))


def from_linear(rgb: RGB) -> RGB:
    def enc(v: float) -> float:
        v = min(1.0, max(0.0, v))
        return v * 12.92 if v <= 0.0031308 else 1.055 * v ** (1 / 2.4) - 0.055
    return (enc(rgb[0]), enc(rgb[1]), enc(rgb[2]))


def _apply(matrix: tuple[RGB, RGB, RGB], v: RGB) -> RGB:
    return (matrix[0][0] * v[0] + matrix[0][1] * v[1] + matrix[0][2] * v[2],
            matrix[1][0] * v[0] + matrix[1][1] * v[1] + matrix[1][2] * v[2],
            matrix[2][0] * v[0] + matrix[2][1] * v[1] + matrix[2][2] * v[2])


def deutan(rgb: RGB) -> RGB:
    """How an sRGB colour looks with deuteranopia (Machado 2009, severity 1.0)."""
    return from_linear(_apply(DEUTAN_MATRIX, to_linear(rgb)))


def to_lab(rgb: RGB) -> Lab:
    """CIELAB (D65) of an sRGB colour."""
    x, y, z = _apply(_SRGB_TO_XYZ, to_linear(rgb))

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29
    fx, fy, fz = f(x / _WHITE_D65[0]), f(y / _WHITE_D65[1]), f(z / _WHITE_D65[2])
    return (116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz))


def relative_luminance(rgb: RGB) -> float:
    """WCAG 2 relative luminance (0 black .. 1 white)."""
    r, g, b = to_linear(rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: RGB, b: RGB) -> float:
    """WCAG 2 contrast ratio, 1..21."""
    hi, lo = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def delta_e_2000(lab1: Lab, lab2: Lab) -> float:
    """CIEDE2000 colour difference of two CIELAB colours (about 1: just noticeable)."""
    l1, a1, b1 = lab1
    l2, a2, b2 = lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0

    dl = l2 - l1
    dc = c2p - c1p
    if c1p * c2p == 0:
        dh = 0.0
    elif abs(h2p - h1p) <= 180:
        dh = h2p - h1p
    elif h2p - h1p > 180:
        dh = h2p - h1p - 360
    else:
        dh = h2p - h1p + 360
    dh_big = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))

    l_mean = (l1 + l2) / 2
    cp_mean = (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_mean = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_mean = (h1p + h2p) / 2
    elif h1p + h2p < 360:
        h_mean = (h1p + h2p + 360) / 2
    else:
        h_mean = (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(h_mean - 30))
         + 0.24 * math.cos(math.radians(2 * h_mean))
         + 0.32 * math.cos(math.radians(3 * h_mean + 6))
         - 0.20 * math.cos(math.radians(4 * h_mean - 63)))
    d_theta = 30 * math.exp(-(((h_mean - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_mean ** 7 / (cp_mean ** 7 + 25 ** 7))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c = 1 + 0.045 * cp_mean
    s_h = 1 + 0.015 * cp_mean * t
    r_t = -math.sin(math.radians(2 * d_theta)) * r_c
    return math.sqrt((dl / s_l) ** 2 + (dc / s_c) ** 2 + (dh_big / s_h) ** 2
                     + r_t * (dc / s_c) * (dh_big / s_h))


def difference(a: str, b: str, deuteranopia: bool = False) -> float:
    """CIEDE2000 between two "#RRGGBB" colours, as seen with normal vision or with
    deuteranopia."""
    ra, rb = parse_hex(a), parse_hex(b)
    if deuteranopia:
        ra, rb = deutan(ra), deutan(rb)
    return delta_e_2000(to_lab(ra), to_lab(rb))


__all__ = ["contrast_ratio", "delta_e_2000", "deutan", "difference", "parse_hex", "to_lab"]
