"""Application throughput joined with GPU readings: scraping apps' metrics endpoints on their own
cadence (scrape), counter increases with resets (counters), per-app figures (derive), and the
threads and poller glue (monitor); the ``apps:`` config section (settings). See docs/apps.md.
"""
