"""A: the checker, which runs the trusted test against a proxy of the entry point.

Every comparison of the test happens here on values A decoded itself (``check``); the
worker's reporter R carries the verdicts (``start_reporter``). Also A recording several
references in one run (``record_all``), and the reading of the answers of a replayed test
(``Answered``), which the worker's checker C uses.
"""

import os
import resource
import select
import signal
import sys
import time

from .codec import (
    _LENGTH,
    MAX_FRAME,
    RECORD,
    RECORDING,
    REPLAY,
    NotRecorded,
    SampleFailed,
    _outcome,
    decode,
    encode,
    read_exact,
    read_frame,
    replay_plan,
    write_frame,
)
from .sample import CAP_KILL, answer_calls, drop_capabilities, run_sample, sample_mounts

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


class Channel:
    """A's end of the pipes to B."""

    def __init__(self, req_fd, resp_fd):
        self.req_fd = req_fd
        self.resp_fd = resp_fd
        self.calls = 0
        self.broken = None  # set for good once the sample dies or breaks the protocol

    def send(self, payload):
        write_frame(self.req_fd, payload)

    def frame(self):
        return read_frame(self.resp_fd)

    def exact(self, n):
        return read_exact(self.resp_fd, n)

    def ask(self, request):
        if self.broken:
            raise SampleFailed(self.broken)
        try:
            self.send(encode(request))
            reply = decode(self.frame())
        except (EOFError, BrokenPipeError):
            self.broken = "the sample process exited"
        except (ValueError, TypeError, IndexError, OverflowError, UnicodeError) as e:
            self.broken = f"malformed reply from the sample ({type(e).__name__})"
        else:
            if type(reply) is tuple and len(reply) == 2 and reply[0] == "ok":
                return reply[1]
            if type(reply) is tuple and len(reply) == 2 and reply[0] == "err":
                raise SampleFailed(str(reply[1]))
            self.broken = "malformed reply from the sample"
        raise SampleFailed(self.broken)

    def proxy(self, name):
        def candidate(*args, **kwargs):
            self.calls += 1
            return self.ask(("call", name, args, kwargs))

        candidate.__name__ = name
        return candidate


class Answered(Channel):
    """What B wrote before the checker began (its "ready" and its answers to every
    recorded call), as bytes that Z read from B's pipe: read as the checker reads the
    pipe, with nothing to send (B is dead by then)."""

    def __init__(self, data):
        super().__init__(-1, -1)
        self.data = data
        self.at = 0

    def send(self, payload):
        pass

    def exact(self, n):
        if self.at + n > len(self.data):
            raise EOFError("the sample's answers end early")
        self.at += n
        with memoryview(self.data) as view:
            return bytes(view[self.at - n : self.at])

    def frame(self):
        head = self.exact(10)
        if not head.isdigit():
            raise ValueError("malformed frame header")
        if int(head) > MAX_FRAME:
            raise ValueError(f"frame of {int(head)} bytes exceeds the {MAX_FRAME}-byte limit")
        return self.exact(int(head))


# The seed of the checker's ``random`` when a test is recorded or replayed: a test that
# draws its inputs from an unseeded ``random`` (HumanEval/38, /50, /53) makes the same
# calls at both, and replays instead of falling back to calls one by one.
TEST_SEED = 0


def _seed_tests():
    import random

    random.seed(TEST_SEED)


def _write_back(args, after):
    """Apply the sample's in-place changes of the arguments to the test's own objects."""
    if type(after) is not tuple or len(after) != len(args):
        raise SampleFailed("malformed reply from the sample")
    for arg, new in zip(args, after, strict=True):
        if type(arg) is list and type(new) is list:
            arg[:] = new
        elif type(arg) in (dict, set) and type(new) is type(arg):
            arg.clear()
            arg.update(new)


def _answer(outcome, args):
    if outcome[0] == "err":
        raise SampleFailed(outcome[1])
    if outcome[2] is not None:
        _write_back(args, outcome[2])
    return outcome[1]


def recorder(channel, name, record):
    """The candidate of a record job (B runs the reference): each call's arguments, as
    encoded before the call, and its outcome are appended to ``record``."""

    def candidate(*args, **kwargs):
        channel.calls += 1
        key = encode((args, kwargs))
        replies = channel.ask(("calls", name, [(args, kwargs)]))
        if type(replies) is not list or len(replies) != 1:
            raise SampleFailed("malformed reply from the sample")
        outcome = _outcome(replies[0])
        record.append((key, outcome))
        return _answer(outcome, args)

    return candidate


def replayer(channel, name, plan, sample):
    """The candidate of a replayed test: B answers every recorded call in one go, within
    the plan's size cap; B is then killed, and the test meets only these answers, so
    whether a call happens never depends on an earlier answer.

    A call the recording does not list next, but that repeats an earlier one (the same
    arguments: an assert's message that calls the candidate again, say), gets a copy of
    that call's answer; any other stops the replay (``NotRecorded``).
    """
    cap, keys = replay_plan(plan)
    outcomes = _read_outcomes(channel, name, keys, cap, sample)
    first = {}
    for j, key in enumerate(keys):
        first.setdefault(key, j)
    position = [0]  # the next recorded call

    def outcome(at, copy):
        item = outcomes[at]
        if type(item) is not bytes:  # checked: decode(encode()) makes a copy
            return decode(encode(item)) if copy else item
        try:  # an answer sent in a frame of its own, decoded as the test meets it
            return _outcome(decode(item))
        except (ValueError, TypeError, IndexError, OverflowError, UnicodeError, SampleFailed):
            channel.broken = "malformed reply from the sample"
            raise SampleFailed(channel.broken) from None

    def candidate(*args, **kwargs):
        j = channel.calls
        channel.calls += 1
        try:
            key = encode((args, kwargs))
        except (ValueError, TypeError, OverflowError) as e:
            raise NotRecorded(f"call {j}: {type(e).__name__}") from None
        at = position[0]
        if at < len(keys) and key == keys[at]:
            position[0] += 1
            return _answer(outcome(at, False), args)
        at = first.get(key, len(keys))
        if at >= position[0]:
            raise NotRecorded(f"call {j} was not recorded")
        return _answer(outcome(at, True), args)  # a copy: the test may change one

    return candidate


def _read_outcomes(channel, name, keys, cap, sample):
    """B's outcomes of the calls ``keys``, at most ``cap`` bytes of them; B is killed once
    they are read. Each is checked, or where B sent them in parts (they do not fit in one
    frame: a right sample of HumanEval+'s /130 answers 76 MiB), its bytes, decoded only
    when the test makes its call: the checker never holds more than one decoded."""
    # encode(("calls", name, calls)), from the calls as they are already encoded
    request = b"t*" + _LENGTH.pack(3) + encode("calls") + encode(name)
    request += b"l*" + _LENGTH.pack(len(keys)) + b"".join(keys)
    parts = []
    try:
        channel.send(request)
        head = channel.exact(10)
        if not head.isdigit() or int(head) > cap:
            raise SampleFailed(f"answers larger than the cap of {cap} bytes")
        reply = decode(channel.exact(int(head)))
        if reply == ("parts", len(keys)):
            left = cap - int(head)
            for _ in keys:
                head = channel.exact(10)
                if not head.isdigit() or int(head) > min(left, MAX_FRAME):
                    raise SampleFailed(f"answers larger than the cap of {cap} bytes")
                left -= int(head)
                parts.append(channel.exact(int(head)))
    except (EOFError, BrokenPipeError):
        raise SampleFailed("the sample process exited") from None
    except (ValueError, TypeError, IndexError, OverflowError, UnicodeError) as e:
        raise SampleFailed(f"malformed reply from the sample ({type(e).__name__})") from None
    finally:
        if sample:
            os.kill(sample, signal.SIGKILL)
    if parts:
        return parts
    if type(reply) is tuple and len(reply) == 2 and reply[0] == "err":
        raise SampleFailed(str(reply[1]))
    if type(reply) is not tuple or len(reply) != 2 or reply[0] != "ok":
        raise SampleFailed("malformed reply from the sample")
    if type(reply[1]) is not list or len(reply[1]) != len(keys):
        raise SampleFailed("malformed reply from the sample")
    return [_outcome(r) for r in reply[1]]


BYTECODE = b"\0bytecode\0"  # + the magic number of the harness's Python + marshal data


def trusted_code(frame):
    """The prompt or the test in a job frame: its text, or the code object the harness
    compiled from it (``BYTECODE``, the magic number of its Python, ``marshal`` data; sent
    only to a zygote of the harness's own interpreter, and refused from any other)."""
    if not frame.startswith(BYTECODE):
        return frame.decode("utf-8", "surrogatepass")
    import marshal
    from importlib._bootstrap_external import MAGIC_NUMBER

    magic = frame[len(BYTECODE) : len(BYTECODE) + len(MAGIC_NUMBER)]
    if magic != MAGIC_NUMBER:
        raise ValueError("bytecode of another Python version")
    code = marshal.loads(frame[len(BYTECODE) + len(MAGIC_NUMBER) :])
    if type(code) is not type(trusted_code.__code__):
        raise ValueError("the bytecode is not a code object")
    return code


def _compiled(source, name):
    """``source`` compiled (as the harness compiles it), or the code object it already is."""
    if type(source) is str:
        return compile(source, name, "exec", dont_inherit=True, optimize=0)
    return source


def referenced_names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= referenced_names(const)
    return names


def check(prompt, test, entry_point, channel, plan=b"", sample=0, record=None):
    """A's verdict: "passed" only if the test code ran to its end on proxied values.

    ``plan``: empty for calls answered one by one; RECORD to record each call and its
    outcome in ``record``; REPLAY + cap + recording to have B (pid ``sample``) answer all
    recorded calls at once and the test replay them. Both seed ``random`` (TEST_SEED)."""
    import builtins

    try:
        ready = decode(channel.frame())
    except EOFError:
        raise SampleFailed("the sample process exited") from None
    if type(ready) is not tuple or not ready or ready[0] != "ready":
        detail = ready[1] if type(ready) is tuple and len(ready) > 1 else ready
        return f"failed: {detail}"
    namespace = {}
    if entry_point and (plan == RECORD or plan.startswith(REPLAY)):
        _seed_tests()
    exec(_compiled(prompt, "<prompt>"), namespace)
    code = _compiled(test, "<test>")
    if entry_point and plan.startswith(REPLAY):
        proxied = set()
        namespace[entry_point] = replayer(channel, entry_point, plan, sample)
    elif entry_point and plan == RECORD:
        proxied = set()
        namespace[entry_point] = recorder(channel, entry_point, record)
    elif entry_point:
        proxied = {entry_point}
    else:  # free-form tests (the code_eval metric): proxy the sample's functions they use
        wanted = sorted(
            n for n in referenced_names(code) if n not in namespace and not hasattr(builtins, n)
        )
        found = channel.ask(("names", wanted)) if wanted else []
        proxied = set(wanted) & {n for n in found if type(n) is str}
    for name in proxied:
        namespace[name] = channel.proxy(name)
    exec(code, namespace)
    if channel.broken:  # a test that swallows exceptions must not turn a dead sample into a pass
        return f"failed: {channel.broken}"
    if channel.calls == 0:
        return "failed: the test never called the sample"
    return "passed"


NO_VERDICT = "failed: the checker exited without a verdict"
PIPE_BUF = 4096  # a pipe takes a write of up to this many bytes whole, or not at all
REPORT_TEXT = PIPE_BUF - 64  # the most of a verdict's text a report carries


def report(fd, seq, start, verdict, whole=False):
    """Send the worker's reporter the verdict of sample ``seq`` (started at ``start``): in
    one write of less than PIPE_BUF bytes, so that it is whole whoever else writes; or,
    ``whole``, at any length (a record job's, references only, which Z reports once A is
    gone: nothing else writes then)."""
    text = verdict.encode("utf-8", "replace")
    text = text if whole else text[:REPORT_TEXT]
    write_frame(fd, b"%010d" % seq + b"%.6f " % (time.monotonic() - start) + text)


def start_reporter(libc, close=()):
    """Fork the worker's reporter R and give it the harness's end of Z's standard output:
    R's pid and the write end of its pipe, which A and the worker's checker inherit.
    ``close``: Z's descriptors R has no use for (-1: none).

    Every process of a sample is forked from Z, with a copy of its memory, freed blocks
    included, which a sample can read. So a sample's verdict never goes through Z: A (or
    the checker) reports it to R, which alone writes to the harness, and which no sample
    is forked from. Z learns only that a sample is done; it reports a verdict itself only
    where A or the checker could not (timed out, or gone without a report). R passes on
    the first report of each sample and drops any later one (Z's own, should A have
    reported first)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w)
            for fd in close:
                if fd >= 0:
                    os.close(fd)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            serve_reports(r)
        finally:
            os._exit(75)
    os.close(r)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # Z's children no longer inherit the harness's pipe either
    os.close(devnull)
    return pid, w


def serve_reports(fd):
    """R: never returns. Passes on to the harness the first report of each sample."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    last = -1
    while True:
        try:
            frame = read_frame(fd, limit=1 << 40)
        except EOFError:
            os._exit(0)
        seq = int(frame[:10])
        if seq > last:
            last = seq
            write_frame(1, frame[10:])


def run_checker(job, limits, mode, slot, libc, job_fd, res_fd, workdir):
    """A: never returns. Sets up the namespace, forks B, runs the test, reports."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    if mode != "none":
        # /proc's last use: the sample needs no namespace of its own
        workdir = sample_mounts(libc, limits, mode, slot, cover=not limits["checker"])
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.chdir(workdir)
    if limits.get("records"):  # no sample: the references run in children of A
        drop_capabilities(libc)  # a problem file's code runs here: as root, but powerless
        _checker_limits(limits)
        try:
            _prompt, job, _entry, _plan = [read_frame(job_fd) for _ in range(4)]
            verdict = record_all(job.decode("utf-8", "surrogatepass"))
        except BaseException as e:
            verdict = f"failed: {type(e).__name__}: {e}"[:1000]
        write_frame(res_fd, verdict.encode("utf-8", "replace"))
        os._exit(0)
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    b = os.fork()
    if b == 0:
        try:
            os.close(job_fd)
            os.close(res_fd)
            run_sample(job["program"], req_r, resp_w, limits, mode, slot, libc)
        finally:
            os._exit(70)
    os.close(req_r)
    os.close(resp_w)
    # B is forked: A runs a problem file's test, as root but with no capability left
    # other than to kill B (A's namespaces are made, B's uid is set by B itself).
    drop_capabilities(libc, keep=(CAP_KILL,))
    _checker_limits(limits)
    record = []

    def run():
        frames = [read_frame(job_fd) for _ in range(4)]  # prompt, test, entry point, plan
        os.close(job_fd)
        return judge(frames, Channel(req_w, resp_r), b, record)

    verdict, _ = verdict_of(run)
    if record:  # a record job: the reference's calls follow its verdict
        import base64

        verdict += RECORDING + base64.b64encode(encode(record)).decode()
    status = 72
    try:
        if job["report"] is None:  # a record job's: Z reports it
            write_frame(res_fd, verdict.encode("utf-8", "replace"))
        else:
            report(*job["report"], verdict)
        status = 0  # Z reports a verdict of its own where A exits otherwise
    finally:
        if mode == "none":
            for kill in (os.killpg, os.kill):
                try:
                    kill(b, signal.SIGKILL)
                except OSError:
                    pass
        os._exit(status)


def judge(frames, channel, sample=0, record=None):
    """``check`` on a job's frames: the prompt, the test, the entry point and the plan."""
    prompt, test = trusted_code(frames[0]), trusted_code(frames[1])
    entry_point = frames[2].decode("utf-8", "surrogatepass")
    return check(prompt, test, entry_point, channel, frames[3], sample, record)


def verdict_of(run):
    """``run()``'s verdict, its exceptions made the verdict a sample gets, and whether it
    ended as a check ends (passed, failed an assert, a sample's failure or a call not
    recorded): anything else may have left the checker's process in a state of its own."""
    try:
        return run()[:1000], True
    except NotRecorded as e:
        return f"not recorded: {e}"[:1000], True
    except SampleFailed as e:
        return f"failed: {e}"[:1000], True
    except AssertionError as e:
        return f"failed: AssertionError {e}".rstrip()[:1000], True
    except BaseException as e:
        return f"failed: {type(e).__name__}: {e}"[:1000], False


def _checker_limits(limits, cpu=True):
    if limits["checker"]:  # importable by the trusted test code only
        sys.path.extend(limits["checker"])
        os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if cpu:
        seconds = int(limits["timeout"]) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# -- A recording several references in one run --------------------------------------------


def record_all(job):
    """A's verdict for a job that records several problems' tests against their reference
    solutions: JSON, one record job's verdict per problem (``"passed" + RECORDING + the
    recording``, or why not).

    ``job`` is JSON: ``[prompt, reference, test, entry point, seconds]`` per problem. A
    reference is the problem file's code, as its test is, so it runs where its test runs:
    in a child of A (a process group of its own), one problem after another, each within
    its ``seconds``, the reference in a namespace beside the test's, every call crossing
    the codec as it would cross the pipes from B (:func:`local_recorder`). A problem that
    hangs or ends the child loses its own recording only: the next gets a new child. (One
    child per problem cost ~10 ms each on a loaded 2-core machine, as much as a sample.)
    """
    import json

    items = json.loads(job)
    if type(items) is not list:
        raise ValueError("a records job is a list")
    for item in items:
        if type(item) is not list or len(item) != 5 or not all(type(t) is str for t in item[:4]):
            raise ValueError("a records job's item is [prompt, reference, test, entry, seconds]")
        item[4] = float(item[4])
    verdicts = []
    while len(verdicts) < len(items):
        verdicts += _record_in_child(items[len(verdicts) :])
    return json.dumps(verdicts)


def _record_in_child(items):
    """The record verdicts of ``items``, in a child of A, as far as it gets: at least the
    first's ("timed out" or "failed" where it did not finish)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(r)
            os.setpgid(0, 0)
            for prompt, reference, test, entry_point, _ in items:
                verdict = record_reference(prompt, reference, test, entry_point)
                write_frame(w, verdict.encode("utf-8", "surrogatepass"))
        finally:
            os._exit(0)
    os.close(w)
    try:
        os.setpgid(child, child)
    except OSError:
        pass  # it did so itself, or has exited
    verdicts = []
    try:
        for item in items:
            try:
                reply = _read_frame_until(r, time.monotonic() + item[4])
            except EOFError:
                verdicts.append("failed: the reference's process exited")
                break
            if reply is None:
                verdicts.append("timed out")
                break
            verdicts.append(reply.decode("utf-8", "replace"))
    finally:
        os.close(r)
        for kill in (os.killpg, os.kill):
            try:
                kill(child, signal.SIGKILL)
            except OSError:
                pass
        os.waitpid(child, 0)
    return verdicts


def _read_frame_until(fd, end):
    """A frame from ``fd`` (and nothing past it), or None if it is not whole by ``end``;
    EOFError if ``fd`` closes first or the frame is malformed."""
    data = bytearray()
    need = 10
    while len(data) < need:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, min(1 << 20, need - len(data)))
        if not chunk:
            raise EOFError("pipe closed")
        data += chunk
        if need == 10 and len(data) == 10:
            if not data.isdigit() or int(data) > MAX_FRAME:
                raise EOFError("malformed frame")
            need = 10 + int(data)
    return bytes(data[10:])


def record_reference(prompt, reference, test, entry_point):
    """A record job's verdict, the reference run in this process: as ``run_checker``'s."""
    record = []
    try:
        solution = {}
        exec(compile(reference, "<sample>", "exec"), solution)
        function = solution.get(entry_point)
        namespace = {}
        _seed_tests()
        exec(compile(prompt, "<prompt>", "exec"), namespace)
        code = compile(test, "<test>", "exec")
        if not callable(function):
            raise SampleFailed(f"KeyError: {entry_point!r}")
        namespace[entry_point] = local_recorder(function, record)
        exec(code, namespace)
        verdict = "passed" if record else "failed: the test never called the sample"
    except SampleFailed as e:
        verdict = f"failed: {e}"
    except AssertionError as e:
        verdict = f"failed: AssertionError {e}".rstrip()
    except BaseException as e:
        verdict = f"failed: {type(e).__name__}: {e}"
    verdict = verdict[:1000]
    if verdict == "passed":
        import base64

        verdict += RECORDING + base64.b64encode(encode(record)).decode()
    return verdict


def local_recorder(function, record):
    """``recorder``'s candidate with the reference in this process: each call's arguments
    and outcome cross the codec both ways, as between A and B, so that the recording is
    the one B would give."""

    def candidate(*args, **kwargs):
        key = encode((args, kwargs))
        try:
            reply = decode(encode(("ok", answer_calls(function, [decode(key)]))))
        except BaseException as e:  # B answers these (and unencodable results) with "err"
            raise SampleFailed(f"{type(e).__name__}: {e}"[:500]) from None
        outcome = _outcome(reply[1][0])
        record.append((key, outcome))
        return _answer(outcome, args)

    return candidate
