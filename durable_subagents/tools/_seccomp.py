"""The seccomp filter every sandboxed command runs under: calls a tool never needs.

Dropping capabilities already keeps a tool from mounting, unmounting or loading
anything into the kernel in its own namespaces. The filter closes what capabilities
leave open, and makes the refusals explicit:

- **No new namespaces, no mount changes.** ``unshare``, ``setns``, ``clone`` with a
  ``CLONE_NEW*`` flag, ``mount``, ``umount2``, ``pivot_root``, ``chroot`` and the new
  mount API (``open_tree``, ``move_mount``, ``fsopen``, ``fsconfig``, ``fsmount``,
  ``fspick``, ``mount_setattr``). A new user namespace would hand the tool every
  capability again (over a copy of its mounts, but a copy is still more than it needs).
- **No set-user-ID or set-group-ID bits.** ``chmod``, ``fchmod``, ``fchmodat``,
  ``fchmodat2``, ``open``, ``openat``, ``creat``, ``mknod`` and ``mknodat`` fail when
  their mode asks for ``S_ISUID`` or ``S_ISGID``: a file the tool leaves in the
  workspace never runs as its owner for somebody else. (File capabilities need
  ``CAP_SETFCAP``, which the tool does not have.)
- **No kernel surfaces a tool has no use for:** keyrings (``keyctl``, ``add_key``,
  ``request_key``), ``bpf``, ``perf_event_open``, ``userfaultfd``, module and kexec
  loading, ``reboot``, swap, ``acct``, ``quotactl``, ``syslog``, ``iopl``/``ioperm``,
  ``lookup_dcookie``, ``vhangup``, ``nfsservctl``, ``uselib``, and ``ioctl``'s
  ``TIOCSTI`` and ``TIOCLINUX`` (typing into a terminal).
- **Calls whose arguments the filter cannot read** answer ``ENOSYS``, so programs fall
  back to the ones it can: ``clone3`` (to ``clone``), ``openat2`` (to ``openat``) and
  io_uring (to plain reads and writes), as do system calls newer than this table.

``ptrace`` stays allowed: in its own PID namespace a tool sees only its own processes,
so debuggers and ``strace`` work and nothing outside can be reached.

Foreign system call ABIs (32-bit x86 on x86-64, x32) are refused: their numbers differ,
and a filter that checks one table must not let the other through. The program is
classic BPF built here, without libseccomp: bubblewrap installs it (``--seccomp FD``)
right before it runs the command.
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import stat
import struct

__all__ = ["REFUSED_CALLS", "seccomp_program", "seccomp_supported"]

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR = 0
_ARCH = 4


def _arg(index: int) -> int:
    """Offset of the low 32 bits of argument ``index`` (little-endian machines)."""
    return 16 + 8 * index


_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06

_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000

_AUDIT_ARCH_X86_64 = 0xC000003E
_AUDIT_ARCH_AARCH64 = 0xC00000B7
_X32_BIT = 0x40000000

_CLONE_NEW = (
    0x00000080  # CLONE_NEWTIME
    | 0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
_SET_ID_BITS = stat.S_ISUID | stat.S_ISGID
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C

_REFUSED = (
    "mount umount2 pivot_root chroot open_tree move_mount fsopen fsconfig fsmount fspick "
    "mount_setattr open_tree_attr unshare setns keyctl add_key request_key bpf "
    "perf_event_open userfaultfd kexec_load kexec_file_load init_module finit_module "
    "delete_module reboot swapon swapoff acct quotactl quotactl_fd syslog iopl ioperm "
    "lookup_dcookie vhangup nfsservctl uselib"
).split()
_UNAVAILABLE = "clone3 openat2 io_uring_setup io_uring_enter io_uring_register".split()
_MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3}
_MODE_ARG |= {"creat": 1, "mknod": 1, "mknodat": 2}

REFUSED_CALLS: dict[str, str] = {
    **{name: "EPERM" for name in _REFUSED},
    "clone": "EPERM with a CLONE_NEW* flag",
    **{name: "EPERM with S_ISUID or S_ISGID in the mode" for name in _MODE_ARG},
    "ioctl": "EPERM for TIOCSTI and TIOCLINUX",
    **{name: "ENOSYS" for name in _UNAVAILABLE},
}
"""What the filter refuses and how (documented in the README's sandbox section)."""

# System call numbers, from the kernel's tables (arch/x86/entry/syscalls/syscall_64.tbl
# and include/uapi/asm-generic/unistd.h). Calls an architecture lacks are absent.
_X86_64 = {
    "open": 2, "ioctl": 16, "clone": 56, "chmod": 90, "fchmod": 91, "creat": 85,
    "syslog": 103, "mknod": 133, "uselib": 134, "vhangup": 153, "pivot_root": 155,
    "chroot": 161, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175,
    "delete_module": 176, "quotactl": 179, "nfsservctl": 180, "lookup_dcookie": 212,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "openat": 257,
    "mknodat": 259, "fchmodat": 268, "unshare": 272, "perf_event_open": 298,
    "setns": 308, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "openat2": 437,
    "mount_setattr": 442, "quotactl_fd": 443, "fchmodat2": 452, "open_tree_attr": 467,
}  # fmt: skip
_AARCH64 = {
    "lookup_dcookie": 18, "ioctl": 29, "mknodat": 33, "umount2": 39, "mount": 40,
    "pivot_root": 41, "nfsservctl": 42, "chroot": 51, "fchmod": 52, "fchmodat": 53,
    "openat": 56, "vhangup": 58, "quotactl": 60, "acct": 89, "unshare": 97,
    "kexec_load": 104, "init_module": 105, "delete_module": 106, "syslog": 116,
    "reboot": 142, "add_key": 217, "request_key": 218, "keyctl": 219, "clone": 220,
    "swapon": 224, "swapoff": 225, "perf_event_open": 241, "setns": 268,
    "finit_module": 273, "bpf": 280, "userfaultfd": 282, "kexec_file_load": 294,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "openat2": 437, "mount_setattr": 442,
    "quotactl_fd": 443, "fchmodat2": 452, "open_tree_attr": 467,
}  # fmt: skip
_NEWER_THAN_TABLE = 470
"""System calls from here on are unknown to this table: they answer ``ENOSYS``."""

_MACHINES = {
    "x86_64": (_AUDIT_ARCH_X86_64, _X86_64),
    "amd64": (_AUDIT_ARCH_X86_64, _X86_64),
    "aarch64": (_AUDIT_ARCH_AARCH64, _AARCH64),
    "arm64": (_AUDIT_ARCH_AARCH64, _AARCH64),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def seccomp_supported(machine: str | None = None) -> bool:
    """Whether the filter has a system call table for this machine."""
    return (machine or platform.machine()).lower() in _MACHINES


@functools.lru_cache(maxsize=4)
def seccomp_program(machine: str | None = None) -> bytes:
    """The filter as bubblewrap's ``--seccomp`` reads it: ``struct sock_filter`` items.

    Args:
        machine: ``platform.machine()`` of the worker (default: this one).

    Raises:
        ValueError: There is no system call table for ``machine``.
    """
    name = (machine or platform.machine()).lower()
    if name not in _MACHINES:
        raise ValueError(f"no seccomp table for {name}; known: x86_64, aarch64")
    arch, table = _MACHINES[name]
    eperm = _ERRNO | errno.EPERM
    enosys = _ERRNO | errno.ENOSYS
    out = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ, arch, jt=1),
        _insn(_RET, _KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
    ]
    if arch == _AUDIT_ARCH_X86_64:
        out += [_insn(_JGE, _X32_BIT, jf=1), _insn(_RET, _KILL_PROCESS)]
    out += [_insn(_JGE, _NEWER_THAN_TABLE, jf=1), _insn(_RET, enosys)]
    for call, answer in [*((c, eperm) for c in _REFUSED), *((c, enosys) for c in _UNAVAILABLE)]:
        if call in table:
            out += [_insn(_JEQ, table[call], jf=1), _insn(_RET, answer)]
    # Calls refused for some arguments: test the number, then the argument; either way
    # the program returns there, so the loaded number is not needed again.
    checks = [("clone", 0, _CLONE_NEW), *((c, i, _SET_ID_BITS) for c, i in _MODE_ARG.items())]
    for call, index, bits in checks:
        if call in table:
            out += [
                _insn(_JEQ, table[call], jf=4),
                _insn(_LD_W_ABS, _arg(index)),
                _insn(_JSET, bits, jf=1),
                _insn(_RET, eperm),
                _insn(_RET, _ALLOW),
            ]
    out += [
        _insn(_JEQ, table["ioctl"], jf=5),
        _insn(_LD_W_ABS, _arg(1)),
        _insn(_JEQ, _TIOCSTI, jt=1),
        _insn(_JEQ, _TIOCLINUX, jf=1),
        _insn(_RET, eperm),
        _insn(_RET, _ALLOW),
        _insn(_RET, _ALLOW),
    ]
    return b"".join(out)


def program_fd(machine: str | None = None) -> int:
    """A pipe's read end holding the program, for ``bwrap --seccomp FD`` (caller closes it)."""
    program = seccomp_program(machine)
    read, write = os.pipe()
    try:
        os.write(write, program)  # a few hundred bytes: far below a pipe's buffer
    finally:
        os.close(write)
    return read
