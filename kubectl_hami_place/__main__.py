import sys

from kubectl_hami_place.cli import main

sys.exit(main())
