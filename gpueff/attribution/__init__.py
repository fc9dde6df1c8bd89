"""Who holds each GPU: processes and their owners (holders), Slurm jobs, Kubernetes pods, read from
/proc and cgroups."""
