from exporter.commands.cli import main

raise SystemExit(main())
