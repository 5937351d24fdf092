"""umrouter: an implementation of the Ultra Messaging Dynamic Routing Option (tnwgd) and the UM
messaging library it needs."""
import os

# numpy's OpenBLAS starts a thread for each further CPU as it is imported, and that thread spins
# for about 0.1 s of CPU before it sleeps: every router process and tool would pay it at start, on
# a host whose CPUs carry the messages. Nothing here does linear algebra: one thread is enough.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
