from codeparrot.cli import main

raise SystemExit(main())
