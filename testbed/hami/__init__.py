"""HAMi on the test bed: its real scheduler (``scheduler``), the labelled stand-ins for its Filter and
its allocation write (CI has no HAMi binary), the model of where it places a pod (``simulate``), its
annotated pods, and the differential test of the core's Fit against its Filter (``fit_*``)."""
