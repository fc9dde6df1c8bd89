"""gpu-efficiency-exporter top: the command (command.py), its table (table.py) and the reader of --url (scrape.py)."""
