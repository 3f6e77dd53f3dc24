"""The render farm's pieces: images, POV-Ray, the master's scheduling, workers, progress.

Nothing here imports mpi4py except `master` and `worker`, so the image and
POV-Ray code (and the elastic policy) can be tried without an MPI run.
"""
