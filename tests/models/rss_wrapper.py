"""rss_wrapper.py PROGRAM ARGS...: what mpirun starts on every rank in the memory tests and
benchmarks: runs PROGRAM, writes its peak RSS in KiB (wait4's ru_maxrss: VmHWM) to
rss.<rank> in the working folder when it exits, and exits with its status."""
import os
import sys

pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "x")
with open("rss.%s" % rank, "w") as f:
    f.write("%d\n" % usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode")
         else (status >> 8))
