"""A stock grpc-python client of flightrecd, for the end-to-end tests.

Stubs are generated from proto/flightrec.proto by the test (grpc_tools.protoc)
into STUBS. The channel is a plain `grpc.insecure_channel("unix:SOCKET")`,
with no authority override: what a new user would write.

    flightrec_client.py STUBS SOCKET every-rpc   -> one JSON object on stdout
    flightrec_client.py STUBS SOCKET revoke      -> Status, waits for a line on
                                                   stdin, Status again on the
                                                   same connection
"""

import json
import sys
import threading

stubs, socket, mode = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, stubs)

import grpc  # noqa: E402
import flightrec_pb2 as pb  # noqa: E402
import flightrec_pb2_grpc as pb_grpc  # noqa: E402

TIMEOUT = 30


def code_of(call):
    try:
        call()
        return "OK", ""
    except grpc.RpcError as e:
        return e.code().name, e.details()


def every_rpc(channel):
    api = pb_grpc.FlightRecorderStub(channel)
    out = {}
    status = api.Status(pb.StatusRequest(), timeout=TIMEOUT)
    out["status"] = {"version": status.version, "pid": status.pid}

    # Watch on its own thread; the dump below is its event.
    watch = api.Watch(pb.WatchRequest(), timeout=TIMEOUT)
    watched = []
    started = threading.Event()

    def follow():
        started.set()
        for event in watch:
            if event.WhichOneof("kind") == "snapshot_created":
                watched.append(event.snapshot_created.snapshot.id)
                return

    follower = threading.Thread(target=follow)
    follower.start()
    started.wait()

    dump = api.Dump(pb.DumpRequest(label="from-python"), timeout=TIMEOUT)
    out["dump"] = {"id": dump.snapshot.id, "path": dump.snapshot.path, "cpus": len(dump.cpus)}
    follower.join(TIMEOUT)
    watch.cancel()
    out["watch"] = watched

    listed = api.List(pb.ListRequest(), timeout=TIMEOUT)
    out["list"] = [s.id for s in listed.snapshots]

    compressed = api.Compress(pb.CompressRequest(id=dump.snapshot.id, level=1), timeout=TIMEOUT)
    out["compress"] = {"compressed": compressed.snapshot.compressed,
                       "bytes_before": compressed.bytes_before,
                       "bytes": compressed.snapshot.bytes}

    # 0 means "no limit", as in the config: nothing goes.
    rotated = api.Rotate(pb.RotateRequest(max_snapshots=0), timeout=TIMEOUT)
    out["rotate_zero"] = {"removed": len(rotated.removed), "kept": len(rotated.kept)}
    # A limit that would remove everything needs delete_all...
    code, details = code_of(lambda: api.Rotate(pb.RotateRequest(max_bytes=1), timeout=TIMEOUT))
    out["rotate_everything"] = {"code": code, "details": details}
    # ...which then does.
    rotated = api.Rotate(pb.RotateRequest(delete_all=True), timeout=TIMEOUT)
    out["rotate_delete_all"] = {"removed": len(rotated.removed), "kept": len(rotated.kept)}

    reloaded = api.Reload(pb.ReloadRequest(), timeout=TIMEOUT)
    out["reload"] = {"changed": reloaded.changed}

    # A DumpRequest whose label (field 1, a string) is not UTF-8.
    raw = channel.unary_unary("/flightrec.v1.FlightRecorder/Dump")
    code, details = code_of(lambda: raw(b"\x0a\x02\xff\xfe", timeout=TIMEOUT))
    out["malformed"] = {"code": code, "details": details}
    return out


def revoke(channel):
    api = pb_grpc.FlightRecorderStub(channel)
    code, details = code_of(lambda: api.Status(pb.StatusRequest(), timeout=TIMEOUT))
    print(json.dumps({"code": code, "details": details}), flush=True)
    sys.stdin.readline()
    code, details = code_of(lambda: api.Status(pb.StatusRequest(), timeout=TIMEOUT))
    print(json.dumps({"code": code, "details": details}), flush=True)


with grpc.insecure_channel("unix:" + socket) as channel:
    if mode == "every-rpc":
        print(json.dumps(every_rpc(channel)), flush=True)
    elif mode == "revoke":
        revoke(channel)
    else:
        sys.exit("unknown mode " + mode)
