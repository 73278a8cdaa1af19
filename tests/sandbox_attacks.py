"""Hostile sample code shared by the sandbox tests of several levels."""

#: Holds SysV shared memory past ``memory_mb`` (segments written through a mapping, then detached)
#: and makes a message queue; prints how many MB it held and what ``msgget`` answered.
SYSV_ATTACK = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
held = 0
for _ in range(6):  # each segment written through a mapping, then detached: RLIMIT_AS no longer counts it
    segment = libc.shmget(0, 64 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if segment < 0:
        print("SHMGET", os.strerror(ctypes.get_errno()))
        break
    address = libc.shmat(segment, None, 0)
    ctypes.memset(address, 1, 64 << 20)
    libc.shmdt(ctypes.c_void_p(address))
    held += 64
print("SHM_HELD_MB", held)
queue = libc.msgget(0, 0o1600)
print("MSGGET", queue, os.strerror(ctypes.get_errno()) if queue < 0 else "")
"""
