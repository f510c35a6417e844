"""Generates the runplane.v1 Python client (messages and gRPC stubs) from proto/.

    python generate.py [--out DIR]

Uses grpcio-tools' bundled protoc, so nothing but `pip install -r requirements.txt` is
needed. The output (default: gen/ next to this file) is a namespace package `runplane.v1`;
put DIR on sys.path and `from runplane.v1 import worker_service_pb2`.
"""

import argparse
import importlib.resources
import pathlib
import sys

from grpc_tools import protoc

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"


def generate(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    sources = sorted(str(p) for p in (PROTO_ROOT / "runplane" / "v1").glob("*.proto"))
    if not sources:
        raise SystemExit(f"no .proto files under {PROTO_ROOT}")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "gen")
    generate(parser.parse_args().out)


if __name__ == "__main__":
    sys.exit(main())
