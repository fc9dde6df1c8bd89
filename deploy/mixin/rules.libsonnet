// Generated from deploy/prometheus/rules-source.yml by deploy/prometheus/build_prometheus_rule.py:
// do not edit. mixin.libsonnet fills in $job_selector and $runbook_base_url from its _config.
{
  "defaults": {
    "job_selector": "job=\"gpu-efficiency-exporter\"",
    "runbook_base_url": "https://github.com/gpu-efficiency-exporter/gpu-efficiency-exporter/blob/main/docs/dashboards-and-alerts.md"
  },
  "prometheusRules": {
    "groups": [
      {
        "name": "gpu-efficiency.recording",
        "rules": [
          {
            "record": "instance_gpu:gpueff_gpu_utilization:ratio_rate5m",
            "expr": "rate(gpueff_gpu_busy_seconds_total[5m])"
          },
          {
            "record": "instance_gpu:gpueff_sm_active:ratio_rate5m",
            "expr": "rate(gpueff_sm_active_seconds_total[5m])"
          },
          {
            "record": "instance_gpu:gpueff_efficiency:ratio_rate5m",
            "expr": "clamp_max(rate(gpueff_sm_active_seconds_total[5m]) / (rate(gpueff_gpu_busy_seconds_total[5m]) > 0), 1) unless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1)"
          },
          {
            "record": "job:gpueff_efficiency:ratio_rate5m",
            "expr": "clamp_max(\n  sum by (cluster, job) (rate(gpueff_sm_active_seconds_total[5m]) unless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1))\n  / (sum by (cluster, job) (rate(gpueff_gpu_busy_seconds_total[5m]) unless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1)) > 0),\n  1\n)\n"
          },
          {
            "record": "job:gpueff_sm_active:ratio_rate5m",
            "expr": "avg by (cluster, job) (rate(gpueff_sm_active_seconds_total[5m]))"
          },
          {
            "record": "job:gpueff_gpu_utilization:ratio_rate5m",
            "expr": "avg by (cluster, job) (rate(gpueff_gpu_busy_seconds_total[5m]))"
          },
          {
            "record": "job:gpueff_busy_idle_sm_gpu_hours:increase1h",
            "expr": "sum by (cluster, job) (increase(gpueff_busy_idle_sm_seconds_total[1h])) / 3600"
          },
          {
            "record": "job:gpueff_power_watts:sum",
            "expr": "sum by (cluster, job) (gpueff_power_watts)"
          },
          {
            "record": "job:gpueff_busy_flop_per_joule:ratio",
            "expr": "sum by (cluster, job) (gpueff_busy_flops_per_second)\n/ (sum by (cluster, job) (gpueff_power_watts and on (job, instance, uuid) gpueff_busy_flops_per_second) > 0)\n"
          },
          {
            "record": "namespace:gpueff_sm_active_gpu_hours:increase1h",
            "expr": "sum by (cluster, namespace) (increase(gpueff_sm_active_seconds_total[1h])) / 3600"
          },
          {
            "record": "namespace:gpueff_gpu_busy_gpu_hours:increase1h",
            "expr": "sum by (cluster, namespace) (increase(gpueff_gpu_busy_seconds_total[1h])) / 3600"
          },
          {
            "record": "namespace:gpueff_busy_idle_sm_gpu_hours:increase1h",
            "expr": "sum by (cluster, namespace) (increase(gpueff_busy_idle_sm_seconds_total[1h])) / 3600"
          },
          {
            "record": "namespace:gpueff_busy_idle_sm_cost:increase1h",
            "expr": "sum by (cluster, namespace, currency) (increase(gpueff_busy_idle_sm_cost_total[1h]))"
          },
          {
            "record": "namespace:gpueff_efficiency:ratio_rate5m",
            "expr": "clamp_max(\n  sum by (cluster, namespace) (rate(gpueff_sm_active_seconds_total[5m]) unless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1))\n  / (sum by (cluster, namespace) (rate(gpueff_gpu_busy_seconds_total[5m]) unless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1)) > 0),\n  1\n)\n"
          },
          {
            "record": "namespace:gpueff_power_watts:sum",
            "expr": "sum by (cluster, namespace) (gpueff_power_watts)"
          },
          {
            "record": "namespace:gpueff_gpu_utilization:ratio_avg",
            "expr": "avg by (cluster, namespace) (gpueff_gpu_utilization_ratio)"
          }
        ]
      },
      {
        "name": "gpu-efficiency.holders",
        "rules": [
          {
            "record": "holder:gpueff_efficiency:ratio_rate5m",
            "expr": "clamp_max(\n  sum by (cluster, holder_kind, holder) (rate(gpueff_holder_sm_active_seconds_total[5m]) unless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1))\n  / (sum by (cluster, holder_kind, holder) (rate(gpueff_holder_busy_seconds_total[5m]) unless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1)) > 0),\n  1\n)\n"
          },
          {
            "record": "holder:gpueff_gpu_busy_gpu_hours:increase1h",
            "expr": "sum by (cluster, holder_kind, holder) (increase(gpueff_holder_busy_seconds_total[1h])) / 3600"
          },
          {
            "record": "holder:gpueff_busy_idle_sm_gpu_hours:increase1h",
            "expr": "sum by (cluster, holder_kind, holder) (increase(gpueff_holder_busy_idle_sm_seconds_total[1h])) / 3600"
          },
          {
            "record": "holder:gpueff_energy_kwh:increase1h",
            "expr": "sum by (cluster, holder_kind, holder) (increase(gpueff_holder_energy_joules_total[1h])) / 3.6e6"
          },
          {
            "record": "holder:gpueff_busy_idle_sm_cost:increase1h",
            "expr": "sum by (cluster, holder_kind, holder, currency) (\n  increase(gpueff_holder_busy_idle_sm_seconds_total[1h])\n  * on (cluster, job, instance, uuid) group_left (currency)\n  (\n    sum by (cluster, job, instance, uuid, currency) (rate(gpueff_busy_idle_sm_cost_total[1h]))\n    / on (cluster, job, instance, uuid) group_left ()\n    (sum by (cluster, job, instance, uuid) (rate(gpueff_busy_idle_sm_seconds_total[1h])) > 0)\n  )\n)\n"
          }
        ]
      },
      {
        "name": "gpu-efficiency.application",
        "rules": [
          {
            "record": "namespace:app_generation_tokens:rate5m",
            "expr": "sum by (cluster, namespace) (\n  label_replace(\n    sum by (cluster, namespace) (rate(vllm:generation_tokens_total[5m]))\n    or sum by (cluster, namespace) (rate(vllm_generation_tokens_total[5m])),\n    \"server\", \"vllm\", \"\", \"\")\n  or label_replace(\n    sum by (cluster, namespace) (rate(sglang:generation_tokens_total[5m]))\n    or sum by (cluster, namespace) (rate(sglang_generation_tokens_total[5m])),\n    \"server\", \"sglang\", \"\", \"\")\n  or label_replace(\n    sum by (cluster, namespace) (rate(tgi_request_generated_tokens_sum[5m])),\n    \"server\", \"tgi\", \"\", \"\")\n)\n"
          },
          {
            "record": "namespace:app_requests_arrived:rate5m",
            "expr": "sum by (cluster, namespace) (\n  label_replace(\n    (sum by (cluster, namespace) (rate(vllm:request_success_total[5m])) or sum by (cluster, namespace) (rate(vllm_request_success_total[5m])))\n    + (sum by (cluster, namespace) (deriv(vllm:num_requests_waiting[5m])) or sum by (cluster, namespace) (deriv(vllm_num_requests_waiting[5m])))\n    + (sum by (cluster, namespace) (deriv(vllm:num_requests_running[5m])) or sum by (cluster, namespace) (deriv(vllm_num_requests_running[5m]))),\n    \"server\", \"vllm\", \"\", \"\")\n  or label_replace(\n    (sum by (cluster, namespace) (rate(sglang:num_requests_total[5m])) or sum by (cluster, namespace) (rate(sglang_num_requests_total[5m])))\n    + (sum by (cluster, namespace) (deriv(sglang:num_queue_reqs[5m])) or sum by (cluster, namespace) (deriv(sglang_num_queue_reqs[5m])))\n    + (sum by (cluster, namespace) (deriv(sglang:num_running_reqs[5m])) or sum by (cluster, namespace) (deriv(sglang_num_running_reqs[5m]))),\n    \"server\", \"sglang\", \"\", \"\")\n  or label_replace(\n    sum by (cluster, namespace) (rate(tgi_request_count[5m])),\n    \"server\", \"tgi\", \"\", \"\")\n)\n"
          },
          {
            "record": "app:gpueff_useful_share_of_busy_flops:ratio",
            "expr": "gpueff_app_flops_per_second\n/ on (cluster, job, instance, app)\n(sum by (cluster, job, instance, app) (gpueff_app_gpu_info * on (cluster, job, instance, uuid) group_left () gpueff_busy_flops_per_second) > 0)\n"
          },
          {
            "record": "namespace:app_generation_tokens_per_joule:ratio_rate5m",
            "expr": "namespace:app_generation_tokens:rate5m / on (cluster, namespace) (namespace:gpueff_power_watts:sum > 0)"
          }
        ]
      },
      {
        "name": "gpu-efficiency.rollup",
        "interval": "1h",
        "rules": [
          {
            "record": "namespace:gpueff_busy_idle_sm_cost:increase1d",
            "expr": "sum by (cluster, namespace, currency) (increase(gpueff_busy_idle_sm_cost_total[1d]))"
          },
          {
            "record": "namespace:gpueff_busy_idle_sm_gpu_hours:increase1d",
            "expr": "sum by (cluster, namespace) (increase(gpueff_busy_idle_sm_seconds_total[1d])) / 3600"
          },
          {
            "record": "namespace:gpueff_gpu_busy_gpu_hours:increase1d",
            "expr": "sum by (cluster, namespace) (increase(gpueff_gpu_busy_seconds_total[1d])) / 3600"
          },
          {
            "record": "namespace:gpueff_sm_active_gpu_hours:increase1d",
            "expr": "sum by (cluster, namespace) (increase(gpueff_sm_active_seconds_total[1d])) / 3600"
          },
          {
            "record": "namespace:gpueff_energy_kwh:increase1d",
            "expr": "sum by (cluster, namespace) (increase(gpueff_energy_joules_total[1d])) / 3.6e6"
          }
        ]
      }
    ]
  },
  "prometheusAlerts": {
    "groups": [
      {
        "name": "gpu-efficiency.alerts",
        "rules": [
          {
            "alert": "GpuHighUtilizationLowSmActivity",
            "expr": "avg_over_time(gpueff_sm_active_ratio[30m])\nand ignoring (rule)\navg_over_time(gpueff_mismatch{rule=\"high_util_low_sm\"}[30m]) >= 0.7\nunless on (job, instance, uuid)\ngpueff_readings_implausible == 1\n",
            "for": "10m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU looks busy but its SMs are mostly idle.",
              "description": "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} counted as busy for at least 0.7 of the last 30 minutes while only {{ $value | humanizePercentage }} of its SMs were active on average: the job holds the whole GPU but fills a few SMs. The what_to_try annotation names its bottleneck class now (underfilled: small grids or one stream; host: waiting on the CPU; latency: one warp per SM).",
              "runbook_url": "$runbook_base_url#gpuhighutilizationlowsmactivity",
              "what_to_try": "{{ with printf \"gpueff_bottleneck_class_info{cluster=%q, job=%q, instance=%q} and on (class) (gpueff_bottleneck{cluster=%q, job=%q, instance=%q, uuid=%q} == 1)\" $labels.cluster $labels.job $labels.instance $labels.cluster $labels.job $labels.instance $labels.uuid | query }}{{ with . | first }}Bottleneck now: {{ label \"class\" . }}. {{ label \"what_to_try\" . }}{{ end }}{{ else }}No bottleneck class is known for this GPU now: see the runbook.{{ end }}"
            }
          },
          {
            "alert": "GpuHighUtilizationLowWork",
            "expr": "avg_over_time(gpueff_gpu_utilization_ratio[30m])\nand ignoring (rule)\navg_over_time(gpueff_mismatch{rule=\"high_util_low_work\"}[30m]) >= 0.7\nunless on (job, instance, uuid)\ngpueff_readings_implausible == 1\n",
            "for": "10m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU looks busy but no unit of it does meaningful work.",
              "description": "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} was {{ $value | humanizePercentage }} busy on average, yet for at least 0.7 of the last 30 minutes every math pipe, DRAM and link stayed below a tenth of its peak: kernels occupy the GPU while they wait (tiny dependent kernels, batch 1, synchronisation, spin-waits). The what_to_try annotation names its bottleneck class now (underfilled or latency: too little parallel work; host: waiting on the CPU).",
              "runbook_url": "$runbook_base_url#gpuhighutilizationlowwork",
              "what_to_try": "{{ with printf \"gpueff_bottleneck_class_info{cluster=%q, job=%q, instance=%q} and on (class) (gpueff_bottleneck{cluster=%q, job=%q, instance=%q, uuid=%q} == 1)\" $labels.cluster $labels.job $labels.instance $labels.cluster $labels.job $labels.instance $labels.uuid | query }}{{ with . | first }}Bottleneck now: {{ label \"class\" . }}. {{ label \"what_to_try\" . }}{{ end }}{{ else }}No bottleneck class is known for this GPU now: see the runbook.{{ end }}"
            }
          },
          {
            "alert": "GpuLowEfficiency",
            "expr": "instance_gpu:gpueff_efficiency:ratio_rate5m < 0.3 and instance_gpu:gpueff_gpu_utilization:ratio_rate5m >= 0.5",
            "for": "30m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU does real work in a small share of its busy time.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} does real work in only {{ $value | humanizePercentage }} of its busy time. For 30m the SMs of this GPU were active for less than 0.3 of the time it counted as busy (SM activity / utilization, averaged over 5m): most of the GPU time it holds is wasted.",
              "runbook_url": "$runbook_base_url#gpulowefficiency",
              "what_to_try": "{{ with printf \"gpueff_bottleneck_class_info{cluster=%q, job=%q, instance=%q} and on (class) (gpueff_bottleneck{cluster=%q, job=%q, instance=%q, uuid=%q} == 1)\" $labels.cluster $labels.job $labels.instance $labels.cluster $labels.job $labels.instance $labels.uuid | query }}{{ with . | first }}Bottleneck now: {{ label \"class\" . }}. {{ label \"what_to_try\" . }}{{ end }}{{ else }}No bottleneck class is known for this GPU now: see the runbook.{{ end }}"
            }
          },
          {
            "alert": "GpuLatencyBound",
            "expr": "gpueff_bottleneck{class=\"latency\"} == 1",
            "for": "15m",
            "labels": {
              "severity": "info"
            },
            "annotations": {
              "summary": "GPU is latency bound.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} is latency bound. For 15m the SMs held warps but occupancy stayed under 10 % and every pipe and DRAM under 20 %: kernels wait on dependent loads, synchronisation or spin-waits rather than compute or bandwidth.",
              "runbook_url": "$runbook_base_url#gpulatencybound"
            }
          },
          {
            "alert": "GpuJobStraggler",
            "expr": "avg_over_time(gpueff_job_peer_wait_ratio{$job_selector}[10m]) > 0.2",
            "for": "15m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "A multi-GPU job waits on one slow GPU.",
              "description": "Job {{ $labels.job_kind }} {{ $labels.job_id }} on {{ $labels.instance }} loses {{ $value | humanizePercentage }} of its GPU time waiting on its slowest GPU. For 15m its other GPUs spent more than 0.2 of the job's GPU time (10m average) waiting in collectives for one GPU of the job: gpueff_job_straggler names it. Even out the work per rank, feed that rank's host faster, check its clocks, power and links.",
              "runbook_url": "$runbook_base_url#gpujobstraggler"
            }
          },
          {
            "alert": "GpuAllocatedButIdle",
            "expr": "avg_over_time(gpueff_gpu_utilization_ratio[5m]) < 0.05\nand on (job, instance, gpu, uuid)\n(gpueff_compute_processes > 0 or gpueff_gpu_pod_info)\nunless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1)\n",
            "for": "1h",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU is allocated but idle.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} has been allocated but idle for 1h. A pod or process holds this GPU, but its utilization has stayed under 0.05 for 1h: nobody else can use it.",
              "runbook_url": "$runbook_base_url#gpuallocatedbutidle",
              "what_to_try": "{{ with printf \"gpueff_bottleneck_class_info{cluster=%q, job=%q, instance=%q} and on (class) (gpueff_bottleneck{cluster=%q, job=%q, instance=%q, uuid=%q} == 1)\" $labels.cluster $labels.job $labels.instance $labels.cluster $labels.job $labels.instance $labels.uuid | query }}{{ with . | first }}Bottleneck now: {{ label \"class\" . }}. {{ label \"what_to_try\" . }}{{ end }}{{ else }}No bottleneck class is known for this GPU now: see the runbook.{{ end }}"
            }
          },
          {
            "alert": "AppThroughputFlatUnderRisingLoad",
            "expr": "namespace:app_requests_arrived:rate5m > 1.25 * (namespace:app_requests_arrived:rate5m offset 15m)\nand on (cluster, namespace)\nnamespace:app_generation_tokens:rate5m <= 1.05 * (namespace:app_generation_tokens:rate5m offset 15m)\nand on (cluster, namespace)\nnamespace:gpueff_gpu_utilization:ratio_avg > 0.8\n",
            "for": "10m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "Application throughput stays flat while requests rise.",
              "description": "Namespace {{ $labels.namespace }}: request arrivals rose to {{ $value | printf \"%.2f\" }}/s but generated tokens/s stayed flat while its GPUs are busy. Over 15 minutes request arrivals rose by a factor over 1.25 while generated tokens per second grew by less than 5 % (or stayed at 0), and the GPUs stayed over 80 % busy. The GPU looks saturated but is not delivering more work: compare SM activity and DRAM activity on the application-throughput dashboard to tell a batching limit (SM activity low) from a memory-bandwidth ceiling (DRAM activity near 0.8); at 0 tokens/s the server is stalled.",
              "runbook_url": "$runbook_base_url#appthroughputflatunderrisingload"
            }
          },
          {
            "alert": "GpuProfilingUnavailable",
            "expr": "gpueff_profiling_available == 0",
            "for": "30m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU has no SM activity reading: the efficiency alerts are blind to it.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} has no SM activity: the efficiency alerts cannot fire for it. The exporter reads no profiling metrics (SM activity, occupancy, pipes, DRAM) on this GPU: pre-Hopper without DCGM, profiling restricted to admin users, or another profiler holding the counters. Coarse utilization is still exported, but GpuHighUtilizationLowSmActivity, GpuLowEfficiency and the bottleneck class are blind here.",
              "runbook_url": "$runbook_base_url#gpuprofilingunavailable"
            }
          },
          {
            "alert": "GpuReadingsImplausible",
            "expr": "gpueff_readings_implausible == 1",
            "for": "15m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU profiling counters read physically impossible values.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} reads implausible profiling counters ({{ $labels.check }}). For 15m this GPU's profiling readings failed the counter-health check {{ $labels.check }}: they cannot be physically true, so its class reads unknown and its mismatch, busy-but-idle time, efficiency rules and waste alerts are left out. The runbook says what each check means and what to do.",
              "runbook_url": "$runbook_base_url#gpureadingsimplausible"
            }
          }
        ]
      },
      {
        "name": "gpu-efficiency.health",
        "rules": [
          {
            "alert": "GpuEfficiencyExporterDown",
            "expr": "up{$job_selector} == 0\nor\nabsent(up{$job_selector})\n",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "gpu-efficiency-exporter is down.",
              "description": "{{ with $labels.instance }}Prometheus could not scrape the exporter on {{ . }} (job {{ $labels.job }}){{ else }}Prometheus has no scrape target of the exporter left (no series matches $job_selector){{ end }} for 5m: GPU efficiency, the other GPU alerts and the dashboards have no data there.",
              "runbook_url": "$runbook_base_url#gpuefficiencyexporterdown"
            }
          },
          {
            "alert": "GpuEfficiencyExporterVanished",
            "expr": "max_over_time(up{$job_selector}[1h])\nunless on (job, instance)\nup{$job_selector}\n",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "gpu-efficiency-exporter target vanished from service discovery.",
              "description": "gpu-efficiency-exporter target {{ $labels.instance }} vanished from service discovery. Prometheus scraped this exporter target in the last hour but has no such target now. Expected when a GPU node was drained or scaled down on purpose; otherwise the exporter pod is gone from that node.",
              "runbook_url": "$runbook_base_url#gpuefficiencyexportervanished"
            }
          },
          {
            "alert": "GpuEfficiencyExporterStale",
            "expr": "gpueff_collect_stale == 1",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "gpu-efficiency-exporter serves stale data.",
              "description": "gpu-efficiency-exporter on {{ $labels.instance }} serves stale data. The exporter answers scrapes but its last poll is older than stale_after, so every GPU is served as down.",
              "runbook_url": "$runbook_base_url#gpuefficiencyexporterstale"
            }
          },
          {
            "alert": "GpuEfficiencyExporterCollectErrors",
            "expr": "rate(gpueff_collect_errors_total[5m]) > 0",
            "for": "15m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "gpu-efficiency-exporter keeps failing to collect.",
              "description": "gpu-efficiency-exporter on {{ $labels.instance }} fails {{ $value | printf \"%.2f\" }} collections per second. For 15m the exporter's polls of the GPUs have kept failing (gpueff_collect_errors_total rises): some readings are missing or old.",
              "runbook_url": "$runbook_base_url#gpuefficiencyexportercollecterrors"
            }
          },
          {
            "alert": "GpuKubernetesAttributionDown",
            "expr": "gpueff_kubernetes_attribution_up == 0",
            "for": "10m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "gpu-efficiency-exporter cannot ask the kubelet which pods hold its GPUs.",
              "description": "gpu-efficiency-exporter on {{ $labels.instance }} cannot ask the kubelet which pods hold its GPUs. For 10m the kubelet pod-resources List call has failed (gpueff_kubernetes_attribution_up == 0): after 3 refresh intervals the GPU series lose their namespace/pod/container labels, so per-namespace efficiency, waste and cost fall under namespace=\"\".",
              "runbook_url": "$runbook_base_url#gpukubernetesattributiondown"
            }
          },
          {
            "alert": "GpuAppScrapeDown",
            "expr": "gpueff_app_up == 0",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "An app joined by gpu-efficiency-exporter does not answer its scrapes.",
              "description": "App {{ $labels.app }} on {{ $labels.instance }} does not answer the exporter's scrapes. The exporter could not read the app's throughput counter for 5m (down, slow, too large or not Prometheus text): units per joule, MFU and cost per unit are missing for it.",
              "runbook_url": "$runbook_base_url#gpuappscrapedown"
            }
          },
          {
            "alert": "GpuLost",
            "expr": "gpueff_gpu_up == 0 unless on (job, instance) gpueff_collect_stale == 1",
            "for": "1m",
            "labels": {
              "severity": "critical"
            },
            "annotations": {
              "summary": "GPU cannot be read.",
              "description": "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} cannot be read. The exporter polls but this GPU does not answer: it is lost, fell off the bus or its driver failed. Work on it has probably stopped.",
              "runbook_url": "$runbook_base_url#gpulost"
            }
          },
          {
            "alert": "GpuXidError",
            "expr": "(increase(gpueff_xid_errors_total{xid!~\"48|63|64|74|79|92|94|95|119|120\"}[10m]) > 0)\nor\n(gpueff_xid_errors_total{xid!~\"48|63|64|74|79|92|94|95|119|120\"} unless gpueff_xid_errors_total offset 10m)\n",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU reported an Xid error.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} reported Xid {{ $labels.xid }}. The NVIDIA driver reported a critical Xid event on this GPU in the last 10 minutes. Most such codes (13, 31, 43, 45) come from the application: illegal memory access, a faulting kernel or a killed context.",
              "runbook_url": "$runbook_base_url#gpuxiderror"
            }
          },
          {
            "alert": "GpuCriticalXidError",
            "expr": "(increase(gpueff_xid_errors_total{xid=~\"48|63|64|74|79|92|94|95|119|120\"}[10m]) > 0)\nor\n(gpueff_xid_errors_total{xid=~\"48|63|64|74|79|92|94|95|119|120\"} unless gpueff_xid_errors_total offset 10m)\n",
            "labels": {
              "severity": "critical"
            },
            "annotations": {
              "summary": "GPU reported a hardware Xid error.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} reported hardware Xid {{ $labels.xid }}. Xid {{ $labels.xid }} means a hardware or driver fault (double-bit ECC, row remapping, NVLink, fallen off the bus, contained/uncontained memory error, GSP): results on this GPU may be wrong and jobs on it will fail.",
              "runbook_url": "$runbook_base_url#gpucriticalxiderror"
            }
          },
          {
            "alert": "GpuEccUncorrectableErrors",
            "expr": "increase(gpueff_ecc_errors_total{type=\"uncorrected\"}[10m]) > 0",
            "labels": {
              "severity": "critical"
            },
            "annotations": {
              "summary": "GPU had uncorrectable ECC errors.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} had {{ $value | printf \"%.0f\" }} uncorrectable ECC errors in 10 minutes. Device memory returned data the ECC could not correct: the job that read it got wrong data or was killed, and the page is retired or a row remap is pending.",
              "runbook_url": "$runbook_base_url#gpueccuncorrectableerrors"
            }
          },
          {
            "alert": "GpuEccCorrectableErrorsHigh",
            "expr": "increase(gpueff_ecc_errors_total{type=\"corrected\"}[1h]) > 100",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU corrects many ECC errors.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} corrected {{ $value | printf \"%.0f\" }} ECC errors in an hour. More than 100 correctable ECC errors in an hour: the memory still works, but a rising rate often comes before uncorrectable errors and row remaps.",
              "runbook_url": "$runbook_base_url#gpuecccorrectableerrorshigh"
            }
          },
          {
            "alert": "GpuRowRemapPending",
            "expr": "gpueff_remapped_rows_pending == 1",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU has a memory row remap pending: it needs a reset.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} has a memory row remap pending: it needs a reset. The GPU remapped a failing memory row; the remap takes effect only after a GPU reset. Until then the row is still in use.",
              "runbook_url": "$runbook_base_url#gpurowremappending"
            }
          },
          {
            "alert": "GpuRowRemapFailure",
            "expr": "gpueff_remapped_rows_failure == 1",
            "labels": {
              "severity": "critical"
            },
            "annotations": {
              "summary": "GPU failed to remap a memory row.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} failed to remap a memory row. A row remap failed: the GPU has run out of spare rows in a bank, or the remap itself failed. Its memory can no longer be trusted.",
              "runbook_url": "$runbook_base_url#gpurowremapfailure"
            }
          },
          {
            "alert": "GpuTemperatureHigh",
            "expr": "gpueff_temperature_celsius > 85",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU runs hot.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} runs at {{ $value | printf \"%.0f\" }} °C. For 5m the GPU core ran above 85 °C, near where the driver starts thermal slowdown (about 85-90 °C on data-centre GPUs).",
              "runbook_url": "$runbook_base_url#gputemperaturehigh"
            }
          },
          {
            "alert": "GpuMemoryTemperatureHigh",
            "expr": "gpueff_memory_temperature_celsius > 95",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU memory runs hot.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} has its memory at {{ $value | printf \"%.0f\" }} °C. For 5m the GPU's memory (HBM) ran above 95 °C, where HBM slows down and memory errors become more likely.",
              "runbook_url": "$runbook_base_url#gpumemorytemperaturehigh"
            }
          },
          {
            "alert": "GpuThermalThrottling",
            "expr": "max by (cluster, job, instance, gpu, uuid) (gpueff_clock_event_active{reason=~\"sw_thermal_slowdown|hw_thermal_slowdown\"}) == 1",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU is slowed down by heat.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} is slowed down by heat. For 5m the driver held this GPU's clocks down because it runs too hot: every job on it runs slower than it should.",
              "runbook_url": "$runbook_base_url#gputhermalthrottling"
            }
          },
          {
            "alert": "GpuHardwareSlowdown",
            "expr": "max by (cluster, job, instance, gpu, uuid) (gpueff_clock_event_active{reason=~\"hw_slowdown|hw_power_brake_slowdown\"}) == 1",
            "for": "5m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU is in hardware slowdown.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} is in hardware slowdown. For 5m the hardware itself cut the clocks (HW slowdown or power brake, signalled by the power supply or the board): the GPU runs far below its normal speed.",
              "runbook_url": "$runbook_base_url#gpuhardwareslowdown"
            }
          },
          {
            "alert": "GpuPowerCapped",
            "expr": "gpueff_clock_event_active{reason=\"sw_power_cap\"} == 1\nand on (job, instance, gpu, uuid)\ngpueff_sm_clock_hertz / gpueff_sm_clock_max_hertz < 0.8\n",
            "for": "30m",
            "labels": {
              "severity": "info"
            },
            "annotations": {
              "summary": "GPU runs under its power cap at reduced clocks.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} runs under its power cap at reduced clocks. For 30m the power limit held the SM clock below 0.8 of its maximum. Heavy tensor work often does this; achieved FLOP/s are lower by the same factor.",
              "runbook_url": "$runbook_base_url#gpupowercapped"
            }
          },
          {
            "alert": "GpuThermalViolationShareHigh",
            "expr": "rate(gpueff_clock_violation_seconds_total{reason=\"thermal\"}[10m]) > 0.1",
            "for": "15m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU clocks are held down by heat much of the time.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} spent {{ $value | humanizePercentage }} of the last 10 minutes held down by heat. The driver's thermal-violation counter says the clocks were held below target for more than 0.1 of the time, for 15m: the GPU runs too hot. Unlike GpuThermalThrottling, the counter misses no throttling between polls.",
              "runbook_url": "$runbook_base_url#gputhermalviolationsharehigh"
            }
          },
          {
            "alert": "GpuPowerViolationShareHigh",
            "expr": "rate(gpueff_clock_violation_seconds_total{reason=\"power\"}[30m]) > 0.9",
            "for": "1h",
            "labels": {
              "severity": "info"
            },
            "annotations": {
              "summary": "GPU clocks are held down by its power limit most of the time.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} was power capped {{ $value | humanizePercentage }} of the last 30 minutes. For 1h the power limit held the clocks down more than 0.9 of the time. Normal for dense tensor work at the limit (an H100 under a bf16 matrix-product loop reads 1.0); worth a look when the limit was lowered.",
              "runbook_url": "$runbook_base_url#gpupowerviolationsharehigh"
            }
          },
          {
            "alert": "GpuPcieReplays",
            "expr": "rate(gpueff_pcie_replay_errors_total[10m]) * 60 > 8",
            "for": "10m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU PCIe link retransmits packets.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} retransmits {{ $value | printf \"%.1f\" }} PCIe packets a minute. More than 8 PCIe replays a minute for 10m: the link to this GPU is marginal (riser, slot, seating, cable). Transfers slow down and a worse link drops the GPU off the bus (Xid 79).",
              "runbook_url": "$runbook_base_url#gpupciereplays"
            }
          },
          {
            "alert": "GpuPcieLinkDegraded",
            "expr": "gpueff_pcie_link_width < on (job, instance, gpu, uuid) gpueff_pcie_link_max_width",
            "for": "15m",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU PCIe link runs narrower than it can.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} runs its PCIe link at x{{ $value }}. For 15m the PCIe link trained narrower than the GPU and slot support: lanes failed to come up (seating, riser, slot). Host-device copies run proportionally slower.",
              "runbook_url": "$runbook_base_url#gpupcielinkdegraded"
            }
          },
          {
            "alert": "GpuNvlinkErrors",
            "expr": "increase(gpueff_nvlink_errors_total{type=~\"replay|recovery\"}[10m]) > 0",
            "labels": {
              "severity": "warning"
            },
            "annotations": {
              "summary": "GPU NVLink retransmits or retrains links.",
              "description": "GPU {{ $labels.gpu }} on {{ $labels.instance }} had {{ $value | printf \"%.0f\" }} NVLink {{ $labels.type }} errors in 10 minutes. NVLink retransmitted (replay) or retrained (recovery) links in the last 10 minutes, more than 0 times: collective operations over NVLink slow down, and a failing link goes down (Xid 74).",
              "runbook_url": "$runbook_base_url#gpunvlinkerrors"
            }
          },
          {
            "alert": "GpuNvlinkLinkDown",
            "expr": "gpueff_nvlink_link_active == 0 and on (job, instance, uuid, link) max_over_time(gpueff_nvlink_link_active[6h]) == 1",
            "for": "5m",
            "labels": {
              "severity": "critical"
            },
            "annotations": {
              "summary": "An NVLink of a GPU is down.",
              "description": "NVLink {{ $labels.link }} of GPU {{ $labels.gpu }} on {{ $labels.instance }} is down. This link was up in the last 6 hours and has been down for 5m: traffic between GPUs falls back to slower paths or NCCL jobs fail.",
              "runbook_url": "$runbook_base_url#gpunvlinklinkdown"
            }
          }
        ]
      }
    ]
  }
}
