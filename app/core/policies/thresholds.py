"""The memory levels the app's defaults share, written once.

A GPU is "near its limit" at :data:`ALERT_AT` of its total memory: the alert
policy warns there, the auto-unload policy acts there, and the gauges turn
critical there, so the three agree on what "full" means.  :data:`REARM_AT` is
the hysteresis level below it: a policy that fired stays quiet until usage has
dropped under it, so a GPU hovering around the alert level costs one alert (or
one unload) per crossing, not one per sample.  Users can change both per
policy in the settings; these are the defaults.
"""

from __future__ import annotations

#: Fraction of a GPU's total memory at which alerts fire and auto-unload acts.
ALERT_AT = 0.90
#: Fraction of total below which a policy that fired re-arms; below :data:`ALERT_AT`.
REARM_AT = 0.85
