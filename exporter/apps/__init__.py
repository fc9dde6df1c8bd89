"""Application throughput joined with GPU readings: scraping apps' metrics endpoints on their own
cadence (scrape), counter increases with resets (counters), per-app figures (derive), and the
threads and poller glue (monitor). See docs/apps.md.
"""

from exporter.apps.derive import AppState
from exporter.apps.monitor import AppMonitor

__all__ = ["AppMonitor", "AppState"]
