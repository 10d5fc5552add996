"""Diagnoses from the numbers: trends and leaks, "full in ~N min", advice per
process, and OOM post-mortems.  No Qt; fed by snapshots on the sampler thread
(``doctor.Doctor``) and by the CLI's ``doctor`` command."""
