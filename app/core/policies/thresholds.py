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

#: The bounds a pressure policy's settings are held to, wherever they are set:
#: the window's Auto-unload settings (clamped) and a server's ``set_policy``
#: (refused outside them).  The re-arm level stays at least one point below
#: the threshold.
POLICY_THRESHOLD_MIN = 0.10
POLICY_THRESHOLD_MAX = 0.99
POLICY_REARM_MIN = 0.05
POLICY_REARM_MAX = 0.98
POLICY_REARM_GAP = 0.01
POLICY_MIN_IDLE_MAX_S = 7 * 86400.0
POLICY_MIN_INTERVAL_MAX_S = 86400.0
