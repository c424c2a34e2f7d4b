"""The grader's own code in a graded process: what no cell or graded call can reach or change.

Not imported.  Before any cell runs, worker.py loads this file and its companions (hook.py,
readings.py, answers.py) as modules that stay in sys.modules only while they load, and calls
`install`, which leaves the grader's code in two places only, both out of Python's reach
without an operation the audit hook denies: the interpreter's list of audit hooks, and its
list of functions run after fork() (os.register_at_fork, here a C callable).  Everything else in
the worker (cells; wire.py's replies about cells) is the submission's to rewrite, and the judge
takes what comes from there as its testimony (docs/trust.md).

In each session child the fork starts a **grader thread** (`grader_thread`): it talks to the
judge on a connection of its own, each frame it sends signed with HMAC-SHA256 under the key the
judge gave before any cell ran (over the frame's number, the digest of the request it answers
and its bytes: a frame written by anything else on that connection, replayed or reordered, is
refused by the judge).  It runs no code of the submission's: every call, attribute read and
iteration goes to the session's caller thread (readings.py), and what comes back is read with
C functions only (answers.py: the operations).  So the grader thread itself observes what the
judge must not take on testimony: what a call returned and whether it changed later (the digests of kept results),
the caller's edit of a kept result, the views of the judge's files handed to paged_attention
and to the pool, the allocator's state, the given methods as bound.

No class is defined here: object.__subclasses__() would list it, and its methods would lead to
this code's namespace.
"""

import ctypes
import sys
from _hashlib import hmac_digest, openssl_sha256
from _json import encode_basestring_ascii, make_encoder, make_scanner
from _socket import AF_UNIX, CMSG_SPACE, MSG_CMSG_CLOEXEC, SCM_RIGHTS, SOCK_STREAM, SOL_SOCKET
from _socket import socket as raw_socket
from _struct import pack, unpack
from _thread import start_new_thread
from functools import partial
from os import _exit, getpid, register_at_fork
from os import close as close_fd
from sys import addaudithook
from types import SimpleNamespace

from _pa_grader_answers import answer, grader_error, new_events, new_session
from _pa_grader_hook import QUIET, arm, claim_grader_thread, forked, make_hook
from _pa_grader_readings import make_guard, start_caller

MAX_FRAME = 256 << 20
MAX_FDS = 16  # the judge's files handed over with one request (a batch's pool and a call's inputs)
HELLO = openssl_sha256(b"hello").digest()
ENCODE = make_encoder(None, None, encode_basestring_ascii, None, ":", ",", False, False, True)
SCAN = make_scanner(SimpleNamespace(strict=True, object_hook=None, object_pairs_hook=None, parse_float=float, parse_int=int,
                                    parse_constant={"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__,
                                    memo={}))
SETUP = {}  # what install() was given: the key, the judge's socket, the cells' namespace, ...
# Landlock (confine.scope_session), through a library handle of this module's own: the grader and
# caller threads are scoped as the session child's main thread is (no signal to the zygote or to
# another session, no abstract socket outside it).
SYSCALL = ctypes.CDLL(None, use_errno=True).syscall
SYSCALL.restype = ctypes.c_long
LANDLOCK_CREATE_RULESET, LANDLOCK_RESTRICT_SELF = 444, 446
SCOPE = ctypes.create_string_buffer(pack("<QQQ", 0, 0, 3), 24)  # handled fs and net: none; scoped: abstract sockets, signals


# --- frames ---------------------------------------------------------------------------------------

def encode(value):
    return "".join(ENCODE(value, 0)).encode()


def decode(raw):
    text = raw.decode()
    value, end = SCAN(text, 0)
    if type(value) is not dict or text[end:].strip():
        raise ValueError("a request that is not one JSON object")
    return value


def _read_exact(sock, size):
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_header(sock):
    """A frame's 4 length bytes, and the descriptors the judge handed over with it (SCM_RIGHTS
    comes with a frame's first bytes: session.with_fds)."""
    header, fds = b"", []
    while len(header) < 4:
        data, ancillary, _, _ = sock.recvmsg(4 - len(header), CMSG_SPACE(MAX_FDS * 4), MSG_CMSG_CLOEXEC)
        for level, kind, payload in ancillary:
            if level == SOL_SOCKET and kind == SCM_RIGHTS:
                fds += [unpack("=i", payload[i:i + 4])[0] for i in range(0, len(payload) - len(payload) % 4, 4)]
        if not data:
            for fd in fds:
                close_fd(fd)
            raise EOFError
        header += data
    return header, fds


def receive(sock):
    """The next request's bytes and the descriptors that came with it."""
    header, fds = _read_header(sock)
    (size,) = unpack(">I", header)
    if size > MAX_FRAME:
        for fd in fds:
            close_fd(fd)
        raise ValueError("frame too large")
    return _read_exact(sock, size), fds


def signature(key, number, request, body):
    """HMAC-SHA256 of a frame the grader thread sends (the judge checks it: protocol.signature)."""
    return hmac_digest(key, b"pa-grader-frame" + pack(">Q", number) + request + body, "sha256")


def send_signed(session, body, request):
    mac = signature(SETUP["key"], session["sent"], request, body)
    session["sent"] += 1
    session["sock"].sendall(pack(">I", len(mac) + len(body)) + mac + body)


# --- the grader thread --------------------------------------------------------------------------

def scope_thread():
    """This thread's Landlock scope, as the session child's main thread has it (a thread is scoped alone)."""
    if SYSCALL(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) < 6:
        return
    ruleset = SYSCALL(LANDLOCK_CREATE_RULESET, SCOPE, ctypes.c_size_t(24), ctypes.c_uint32(0))
    if ruleset >= 0:
        SYSCALL(LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
        close_fd(ruleset)


def grader_thread(ready, number):
    """A session child's grader thread (the fork that made the process started it)."""
    ready.acquire()  # the main thread has confined the process and put the session's number in `number`
    claim_grader_thread(SETUP["key"])  # this thread: every frame access denied here
    scope_thread()  # before the caller thread starts: it inherits the scope
    session = new_session(SETUP["ns"], start_caller(SETUP["guard"]), SETUP["seeds"], SETUP["traceback_of"], SETUP["zygote"])
    try:
        sock = raw_socket(AF_UNIX, SOCK_STREAM)
        sock.connect(SETUP["path"])
        session["sock"] = sock
        hello = {"event": "hello", "session": number[0] if type(number[0]) is int else None, "pid": getpid(),
                 "tamper": new_events(session)}
        send_signed(session, encode(hello), HELLO)
        while True:
            raw, session["fds"] = receive(sock)
            try:
                request = openssl_sha256(raw).digest()
                msg = decode(raw)
                if msg.get("op") == "end":
                    break
                reply = reply_bytes(answer(session, msg))
            finally:
                for fd in session["fds"]:  # a file mapped keeps its own
                    close_fd(fd)
                session["fds"] = []
            send_signed(session, reply, request)
    except BaseException:
        pass
    _exit(0)


def in_child(ready, number):
    """In every fork of the worker: frames denied from now on, then the grader thread started."""
    forked()
    start_new_thread(grader_thread, (ready, number))


def reply_bytes(reply):
    try:
        return encode(reply)
    except BaseException as error:
        return encode({"id": reply.get("id"), "ok": False, "error": grader_error(error), "tamper": reply.get("tamper", [])})


def install(key, path, ns, seeds, traceback_of, ready, number, protected):
    """Before the first cell: the audit hook armed, and every fork of this process starting a
    grader thread, which waits for `ready` (released by the session child's main thread once it
    has put the session's number in `number`: worker.py).  `protected`: the namespaces of the
    grader's code (hook.py, readings.py, answers.py and this file's)."""
    SETUP.update(key=key, path=path, ns=ns, seeds=seeds, traceback_of=traceback_of, zygote=getpid(), guard=make_guard())
    addaudithook(make_hook(protected, key))
    # Fork hooks run in the order registered: this one first, before any of the submission's.
    register_at_fork(after_in_child=partial(in_child, ready, number))
    sys.settrace, sys.setprofile = QUIET["settrace"], QUIET["setprofile"]
    arm()

