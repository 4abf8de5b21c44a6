#!/bin/sh
# Slurm prolog (PrologSlurmctld= in slurm.conf, runs once per job on the controller):
# registers the job with Lockstep so that `lockstep diagnose --job <id>` knows its nodes and
# start. Needs LOCKSTEP_URL (the `--http-listen` base URL) and a write token in
# LOCKSTEP_TOKEN or LOCKSTEP_TOKEN_FILE. A failure is logged, never fails the job.
# Exercised by tests/cli/examples.rs against a real `lockstep serve`.
set -u
url="${LOCKSTEP_URL:?set LOCKSTEP_URL, e.g. http://lockstep.example:9201}"
token="${LOCKSTEP_TOKEN:-$(cat "${LOCKSTEP_TOKEN_FILE:-/etc/slurm/lockstep.token}" 2>/dev/null)}"
# Node names as the topology knows them: scontrol expands gpu-node-[01-04]; without it, a
# comma-separated list is taken as it is.
if command -v scontrol >/dev/null 2>&1; then
  nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
else
  nodes=$(printf '%s\n' "$SLURM_JOB_NODELIST" | tr ',' '\n')
fi
json_nodes=$(printf '%s\n' "$nodes" | sed '/^$/d; s/.*/"&"/' | paste -sd, -)
pool=""
[ -n "${LOCKSTEP_STORAGE_POOL:-}" ] && pool=", \"storage_pool\": \"$LOCKSTEP_STORAGE_POOL\""
body="{\"job\": \"$SLURM_JOB_ID\", \"slurm_job_id\": \"$SLURM_JOB_ID\", \"nodes\": [$json_nodes]$pool}"
if ! curl -fsS --max-time 10 -X POST "$url/api/v1/jobs" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d "$body" >/dev/null; then
  echo "lockstep prolog: registering job $SLURM_JOB_ID failed" >&2
fi
exit 0
