#!/usr/bin/env python3
"""Write the etcd harness's seeds (tests/fuzz/etcd.c) into corpus/etcd and
regress/etcd: two steering bytes, then gRPC-framed etcd responses, encoded
here by hand with etcd's field numbers (proto/etcd.proto)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(n):
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, value):
    if isinstance(value, bool):
        return varint(num << 3) + varint(int(value))
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    return varint(num << 3 | 2) + varint(len(value)) + value


def msg(*fields):
    return b"".join(field(n, v) for n, v in fields if v is not None)


def frame(m, flag=0):
    return bytes([flag]) + struct.pack(">I", len(m)) + m


def header(rev):
    return msg((1, 14841639068965178418), (2, 10276657743932975437), (3, rev), (4, 2))


def kv(key, create, value=b"x0", lease=7587869128366466575):
    return msg((1, key), (2, create), (3, create), (4, 1), (5, value), (6, lease))


def range_resp(rev, kvs):
    return msg((1, header(rev)), *[(2, k) for k in kvs], (4, len(kvs)))


KEYS = [kv(b"/dlock/w/aaaaaaaa", 20), kv(b"/dlock/w/bbbbbbbb", 21, b"s0"),
        kv(b"/dlock/w/cccccccc", 22, b"s0"), kv(b"/dlock/w/dddddddd", 25)]

SEEDS = {
    "corpus/etcd/txn-range": frame(msg(
        (1, header(25)), (2, True),
        (3, msg((2, msg((1, header(25)))))),
        (3, msg((1, range_resp(25, KEYS)))))),
    "corpus/etcd/range-semaphore": frame(range_resp(30, [
        kv(b"/dlock/s/a", 10, b"p3"), kv(b"/dlock/s/b", 11, b"p3"),
        kv(b"/dlock/s/c", 14, b"p3"), kv(b"/dlock/s/d", 19, b"p3")])),
    "corpus/etcd/range-shared": frame(range_resp(40, KEYS[1:3] + [KEYS[0]])),
    "corpus/etcd/watch-stream":
        frame(msg((1, header(5)), (3, True))) +
        frame(msg((1, header(6)), (11, msg((1, 1), (2, msg((1, b"/dlock/w/aaaaaaaa"), (3, 6))),
                                           (3, KEYS[0]))))) +
        frame(msg((1, header(7)), (11, msg((2, KEYS[3])))))[:-3],
    "corpus/etcd/watch-compacted": frame(msg(
        (1, header(50)), (4, True), (5, 42),
        (6, b"etcdserver: mvcc: required revision has been compacted"))),
    "corpus/etcd/lease-keepalive": frame(msg((1, header(9)), (2, 7587869128366466575), (3, 10))),
    "corpus/etcd/two-ranges": frame(range_resp(8, KEYS[:2])) + frame(range_resp(9, KEYS[2:])),
    "regress/etcd/compressed": frame(range_resp(8, KEYS[:1]), flag=1),
    "regress/etcd/over-the-limit": b"\0\x01\0\0\x01" + b"\0" * 16,
    "regress/etcd/not-protobuf": frame(b"\xff\xff\xff") + frame(b""),
    "regress/etcd/empty-messages": frame(b"") * 3 + b"\0\0",
}

for name, data in SEEDS.items():
    path = os.path.join(HERE, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\x12\x34" + data)
