"""The tools' library: the zoo, checked runs and numerics, timing, the tracks
(tracks.py) and both side by side (compare/), Inductor's kernels (inductor/), OpInfo
(coverage/) and random graphs (fuzz/). It may import every layer below it
(api, compiler, frontend, runtime, core); only the CLI imports it."""
