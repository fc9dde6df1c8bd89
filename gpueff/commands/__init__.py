"""The command line: the daemon and its flags, check, record and selftest."""
