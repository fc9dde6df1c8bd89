from gpueff.commands.cli import main

raise SystemExit(main())
