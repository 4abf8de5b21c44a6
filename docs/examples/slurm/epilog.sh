#!/bin/sh
# Slurm epilog (EpilogSlurmctld= in slurm.conf): marks the job ended now in Lockstep.
# Same environment as prolog.sh. A failure is logged, never fails the job.
set -u
url="${LOCKSTEP_URL:?set LOCKSTEP_URL, e.g. http://lockstep.example:9201}"
token="${LOCKSTEP_TOKEN:-$(cat "${LOCKSTEP_TOKEN_FILE:-/etc/slurm/lockstep.token}" 2>/dev/null)}"
if ! curl -fsS --max-time 10 -X POST "$url/api/v1/jobs/$SLURM_JOB_ID/end" \
    -H "Authorization: Bearer $token" >/dev/null; then
  echo "lockstep epilog: ending job $SLURM_JOB_ID failed" >&2
fi
exit 0
