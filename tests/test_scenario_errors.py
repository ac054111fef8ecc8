"""Bad input: every malformed scenario exits with status 2 and one line naming the field."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.scenario.overrides import OverrideError, parse_override

VALID = """\
name: ok
seed: 0
network:
  mode: flow
  topology: {kind: single_switch, hosts: 4, bandwidth: 100 Gb/s, latency: 1 us}
workload: {kind: collective, collective: all_reduce, size: 1 MiB, iterations: 2}
"""

SCENARIOS = Path(__file__).parents[1] / "scenarios"
PCIE_SCENARIO = (SCENARIOS / "pipeline_pcie.yaml").read_text()
BERT_SCENARIO = (SCENARIOS / "pipeline_bert_base.yaml").read_text()
TWO_NODES_SCENARIO = (SCENARIOS / "allreduce_two_nodes.yaml").read_text()
MOE_SCENARIO = (SCENARIOS / "moe_demo.yaml").read_text()


def edited(change) -> str:
    data = yaml.safe_load(VALID)
    change(data)
    return yaml.safe_dump(data, sort_keys=False)


def setter(path: str, value):
    def change(data):
        node = data
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return change


def deleter(path: str):
    def change(data):
        node = data
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        del node[last]
    return change


# (case id, file content (str or bytes), extra CLI args, text(s) the error line must contain)
CASES = [
    ("unknown-top-key", edited(setter("foo", 1)), [], "foo: unknown field"),
    ("unknown-workload-key", edited(setter("workload.sizee", "1 MiB")), [], "workload.sizee: unknown field"),
    ("wrong-unit", edited(setter("workload.size", "1 MiB/s")), [], "workload.size: expected a size"),
    ("bandwidth-word", edited(setter("network.topology.bandwidth", "fast")), [],
     "network.topology.bandwidth: expected a bandwidth like '100 Gb/s', got 'fast'"),
    ("negative-size", edited(setter("workload.size", "-1 MiB")), [], "workload.size"),
    ("zero-size", edited(setter("workload.size", "0 B")), [], "workload.size: Input should be greater than 0"),
    ("missing-workload", edited(deleter("workload")), [], "workload: field required"),
    ("missing-hosts", edited(deleter("network.topology.hosts")), [], "network.topology.hosts: field required"),
    ("iterations-word", edited(setter("workload.iterations", "many")), [], "workload.iterations"),
    ("iterations-zero", edited(setter("workload.iterations", 0)), [], "workload.iterations"),
    ("iterations-float", edited(setter("workload.iterations", 2.5)), [], "workload.iterations"),
    ("yaml-syntax", "name: [unclosed\nworkload: {kind: collective\n", [], "YAML syntax error at line"),
    ("unknown-workload-kind", edited(setter("workload.kind", "quantum")), [],
     ("workload.kind: unknown kind 'quantum' (expected one of:", "'collective'")),
    ("unknown-topology-kind", edited(setter("network.topology.kind", "hypercube")), [],
     "network.topology.kind: unknown kind 'hypercube' (expected one of: 'single_switch'"),
    ("unknown-node", edited(setter("network.topology", {"kind": "gpu_cluster", "node": "dgx-z9"})), [],
     "network.topology.node: unknown node 'dgx-z9'"),
    ("empty-file", "", [], "file is empty"),
    ("only-comment", "# nothing here\n", [], "file is empty"),
    ("binary-garbage", bytes(range(256)) * 4, [], "not a text file"),
    ("latin1-text", "name: caf\xe9\n".encode("latin-1"), [], "not a UTF-8 text file"),
    ("top-level-list", "- 1\n- 2\n", [], "expected a mapping at the top level"),
    ("override-missing-path", VALID, ["--set", "nothere.x=1"], "nothere: unknown field"),
    ("override-below-value", VALID, ["--set", "seed.x=1"], "seed: cannot set a field below a value"),
    ("override-typo", VALID, ["--set", "workload.iteratons=3"], "workload.iteratons: unknown field"),
    ("override-bad-value", VALID, ["--set", "workload.size=fast"],
     ("workload.size: expected a size", "got 'fast' (--set workload.size=fast)")),
    ("override-bad-section", VALID, ["--set", "workload.iterations=2", "--set", "network.topology={kind: ring}"],
     ("network.topology", "(--set network.topology={kind: ring})")),
    ("override-no-equals", VALID, ["--set", "workload.size"], "expected --set PATH=VALUE"),
    ("override-list-index", VALID, ["--set", "network.topology.hosts.3=1"], "network.topology.hosts.3"),
    ("negative-latency", edited(setter("network.topology.latency", "-2 us")), [], "network.topology.latency"),
    ("unknown-mode", edited(setter("network.mode", "fluid")), [], "network.mode: Input should be"),
    ("unknown-collective", edited(setter("workload.collective", "allreduce")), [], "workload.collective"),
    ("negative-seed", edited(setter("seed", -1)), [], "seed: Input should be greater than or equal to 0"),
    ("huge-seed", edited(setter("seed", 10**30)), [],
     "seed: Input should be less than or equal to 9223372036854775807"),
    ("seed-string", edited(setter("seed", "abc")), [], "seed: Input should be a valid integer"),
    ("torus-1d", edited(setter("network.topology", {"kind": "torus", "dims": [4], "bandwidth": "1 GB/s"})), [],
     "network.topology.dims"),
    ("hardware-bad-field", edited(setter("hardware", {"gpus": {"x": {
        "peak_flops": {"fp32": "1 TFLOP/s"}, "memory_bandwidth": "fast", "memory_capacity": "1 GiB"}}})), [],
     "hardware.gpus.x.memory_bandwidth: expected a bandwidth"),
    ("hardware-unknown-section", edited(setter("hardware", {"tpus": {}})), [], "hardware.tpus: unknown section"),
    ("too-many-ranks", edited(setter("workload.ranks", 100)), [], "workload.ranks: 100 ranks requested"),
    ("huge-count-not-printed-whole", VALID, ["--set", f"workload.iterations={10**400}"],
     "workload.iterations: Input should be less than or equal to 10000, got an integer of about 401 digits"),
    ("long-string-cut", VALID, ["--set", "seed=" + "x" * 500],
     "seed: Input should be a valid integer, got '" + "x" * 59 + "... (502 characters)"),
    ("unknown-rank-name", edited(setter("workload.ranks", ["h0", "h77"])), [], "workload.ranks: unknown endpoint"),
    ("oversubscription-below-one", edited(setter("network.topology", {
        "kind": "fat_tree", "hosts": 8, "hosts_per_leaf": 4, "bandwidth": "1 GB/s", "oversubscription": 0.5})), [],
     "network.topology.oversubscription"),
    ("missing-network", edited(deleter("network")), [], "network: workload 'collective' needs a network"),
    ("max-time-word", edited(setter("outputs", {"max_time": "soon"})), [], "outputs.max_time: expected a time"),
    ("workload-string", edited(setter("workload", "collective")), [], "workload"),
    ("hosts-string", edited(setter("network.topology.hosts", "four")), [], "network.topology.hosts"),
    # hardware: sections and references of the wrong type
    ("hardware-section-string", edited(setter("hardware", {"storage": "fast"})), [],
     "hardware.storage: expected a mapping of name -> entry, got str"),
    ("hardware-section-list", edited(setter("hardware", {"nodes": [1, 2]})), [],
     "hardware.nodes: expected a mapping of name -> entry, got list"),
    ("hardware-gpu-name-list", edited(setter("hardware", {"nodes": {"n": {
        "cpu": "epyc-7742", "host_memory": "1 TiB", "gpu": ["a100"]}}})), [],
     "hardware.nodes.n.gpu: expected the name of a catalog gpu, got ['a100']"),
    ("hardware-huge-count", edited(setter("hardware", {"nodes": {"n": {
        "cpu": "epyc-7742", "host_memory": "1 TiB", "gpu": "a100", "gpus": 10**15}}})), [],
     "hardware.nodes.n.gpus: expected an integer from 1 to 1048576, got 1000000000000000"),
    # YAML the safe loader accepts silently or chokes on
    ("duplicate-key", VALID + "seed: 3\n", [], "key 'seed' is given twice (first at line 2)"),
    ("deep-nesting", "a: " + "[" * 5000 + "]" * 5000 + "\n", [], "nested too deeply"),
    ("override-deep-nesting", VALID, ["--set", "workload.size=" + "[" * 5000], "workload.size: expected a size"),
    ("yaml11-sexagesimal", VALID.replace("iterations: 2", "iterations: 1:30"), [],
     "workload.iterations: Input should be a valid integer, got '1:30'"),
    ("yaml11-octal", VALID.replace("iterations: 2", "iterations: 010"), [], "workload.iterations"),
    ("alias-bomb", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 8)) + VALID, [],
     "YAML error: expands to more than 1,000,000 values"),
    ("catalog-source-not-text", PCIE_SCENARIO, ["--set", "hardware.nodes.v100-pcie-8.source=[1, 2]"],
     "hardware.nodes.v100-pcie-8.source: expected a string, got a list"),
    ("node-without-gpu-link", PCIE_SCENARIO,
     ["--set", "hardware.nodes.v100-pcie-8.gpu_link=null"],
     "hardware.nodes.v100-pcie-8.gpu_link: node 'v100-pcie-8' has no GPU-GPU link"),
    ("node-without-gpus", PCIE_SCENARIO, ["--set", "hardware.nodes.v100-pcie-8.gpu=null"],
     "hardware.nodes.v100-pcie-8.gpu: node 'v100-pcie-8' has no GPUs"),
    ("gpu-peak-unknown-dtype", PCIE_SCENARIO, ["--set", "hardware.gpus.v100.peak_flops.fp99=1 TFLOP/s"],
     "hardware.gpus.v100.peak_flops.fp99: unknown dtype"),
    ("one-endpoint-topology", VALID, ["--set", "network.topology.hosts=1"],
     "network.topology: the topology has 1 endpoint; a collective needs at least 2 ranks"),
    ("gpu-without-dtype", BERT_SCENARIO,
     ["--set", "workload.dtype=bf16"], "workload.dtype: GPU 'v100' of node 'v100-nvlink-node' has no peak for bf16"),
    ("pipeline-iterations-cap", BERT_SCENARIO,
     ["--set", "workload.iterations=1001"], "workload.iterations: Input should be less than or equal to 1000"),
    # bounded run time: a valid scenario must not run for hours
    ("pipeline-micro-batches-cap", BERT_SCENARIO,
     ["--set", "workload.micro_batches=4097"], "workload.micro_batches: Input should be less than or equal to 4096"),
    ("moe-iterations-cap", MOE_SCENARIO,
     ["--set", "workload.iterations=1001"], "workload.iterations: Input should be less than or equal to 1000"),
    ("memory-beyond-the-gpu", BERT_SCENARIO, ["--set", "workload.memory_capacity=1 PB"],
     "workload.memory_capacity: 909.5 TiB is more than GPU 'v100' has (32 GiB)"),  # would hide an OOM
    ("section-not-a-mapping", VALID, ["--set", "outputs=none"],
     "outputs: expected a mapping of its fields, got 'none'"),  # not pydantic's class name
    # no coercion across types, no inf/nan, numbers within range
    ("bool-for-number", edited(setter("network.topology", {
        "kind": "fat_tree", "hosts": 8, "hosts_per_leaf": 4, "bandwidth": "1 GB/s", "oversubscription": True})), [],
     "network.topology.oversubscription: expected a number like '0.5', got True"),
    ("inf-for-number", edited(setter("network.topology", {
        "kind": "fat_tree", "hosts": 8, "hosts_per_leaf": 4, "bandwidth": "1 GB/s", "oversubscription": 1e400})),
     [], "network.topology.oversubscription: expected a number like '0.5' (finite)"),
    ("bool-for-int", edited(setter("workload.root", True)), [], "workload.root: Input should be a valid integer"),
    ("float-for-int", edited(setter("workload.root", 1.0)), [], "workload.root: Input should be a valid integer"),
    ("huge-count", edited(setter("network.topology.hosts", 10**15)), [],
     "network.topology.hosts: Input should be less than or equal to 1048576"),
    ("huge-latency", edited(setter("network.topology.latency", "1e308 s")), [],
     "network.topology.latency: expected a time like '2 us' of 0 or 1e-30 to 1e+30 s"),
    ("huge-size", edited(setter("workload.size", 1e308)), [], "workload.size: expected a size"),
    ("tiny-bandwidth", edited(setter("network.topology.bandwidth", "1e-300 B/s")), [],
     "network.topology.bandwidth: expected a bandwidth"),
    ("huge-torus", edited(setter("network.topology", {"kind": "torus", "dims": [1024, 1024, 1024],
                                                      "bandwidth": "1 GB/s"})), [],
     "network.topology: torus 1024x1024x1024: 1073741824 nodes"),
    # union members and discriminators in error paths
    ("union-member-tag", edited(setter("workload.ranks", "abc")), [],
     "workload.ranks: Input should be a valid integer or a valid list, got 'abc'"),
    ("union-list-item", edited(setter("workload.ranks", ["h0", 3])), [],
     "workload.ranks.1: Input should be a valid string, got 3"),
    ("kind-missing", edited(deleter("network.topology.kind")), [], "network.topology.kind: field required"),
    ("repeated-rank", edited(setter("workload.ranks", ["h0", "h1", "h0"])), [],
     "workload.ranks: endpoint 'h0' is listed twice"),
    ("hierarchical-uneven-ranks", TWO_NODES_SCENARIO, ["--set", "workload.ranks=12"],
     "workload.ranks: the hierarchical all-reduce needs the same number of ranks on every node"),
    ("gpu-without-fp32", MOE_SCENARIO, ["--set", "hardware.gpus.a100={peak_flops: {bf16: 312 TFLOP/s}, "
                                        "memory_bandwidth: 2039 GB/s, memory_capacity: 80 GiB}"],
     "hardware.gpus.a100.peak_flops: GPU 'a100' has no fp32 peak"),
    ("override-duplicate-key", VALID, ["--set", "workload={kind: collective, kind: collective}"],
     "workload: key 'kind' is given twice"),
    ("mtbf-zero", MOE_SCENARIO, ["--set", "workload.failures.mtbf=0 s"],
     "workload.failures.mtbf: must be > 0"),
    ("replicas-beyond-nodes", MOE_SCENARIO, ["--set", "workload.checkpoint.replicas=3"],
     "workload.checkpoint.replicas: 3 copies of each checkpoint need 3 nodes, the cluster has 2"),
    ("vocab-zero", MOE_SCENARIO, ["--set", "workload.model.vocab=0"], "workload.model.vocab: Input should be greater"),
    ("simd-isa-unknown", PCIE_SCENARIO, ["--set", "hardware.cpus.xeon={sockets: 1, cores_per_socket: 8, "
                                         "clock: 2 GHz, simd: {isa: avx-512, width_bits: 512, fma_units: 2}, "
                                         "memory_bandwidth: 100 GB/s, memory_latency: 90 ns}"],
     "hardware.cpus.xeon.simd.isa: unknown instruction set 'avx-512' (known: avx512, avx2"),
    ("simd-width-wrong", PCIE_SCENARIO, ["--set", "hardware.cpus.xeon={sockets: 1, cores_per_socket: 8, "
                                         "clock: 2 GHz, simd: {isa: sve, width_bits: 320, fma_units: 2}, "
                                         "memory_bandwidth: 100 GB/s, memory_latency: 90 ns}"],
     "hardware.cpus.xeon.simd.width_bits: sve vectors are a multiple of 128 bits up to 2048, got 320"),
    ("global-batch-below-gpus", MOE_SCENARIO, ["--set", "workload.global_batch=24"],
     "workload.global_batch: 24 sequences do not split evenly over the 16 data-parallel GPUs"),
    ("collective-iterations-cap", VALID, ["--set", "workload.iterations=10001"],
     "workload.iterations: Input should be less than or equal to 10000"),
    ("name-too-long", VALID, ["--set", "name=" + "x" * 201], "name: String should have at most 200 characters"),
    # integers past Python's 4300-digit str->int limit: PyYAML's int() raised a ValueError traceback
    ("integer-of-5001-digits", VALID.replace("seed: 0", "seed: 1" + "0" * 5000), [],
     ("at line 2, column 7", "integer of 5001 digits")),
    ("override-integer-of-5001-digits", VALID, ["--set", "workload.size=1" + "0" * 5000],
     ("workload.size", "integer of 5001 digits")),
    ("override-path-too-deep", VALID, ["--set", ".".join(["a"] * 500) + ".b=1", "--set", "seed=1"],
     "path has 501 parts, more than 32"),
    # 10^8 transfers: the run grew past 7 GB in 20 s before it was refused
    ("all-to-all-of-10000-ranks", VALID, ["--set", "workload.collective=all_to_all",
                                          "--set", "network.topology.hosts=10000"],
     "workload.ranks: an all-to-all among 10000 ranks makes 99,990,000 transfers"),
]


@pytest.mark.parametrize(("case", "content", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_malformed_scenario_exits_2_with_one_line(tmp_path: Path, case, content, args, expected):
    path = tmp_path / f"{case}.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(path), "-o", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}: "), lines[0]
    for fragment in (expected,) if isinstance(expected, str) else expected:
        assert fragment in lines[0]
    assert "Traceback" not in result.output


def test_directory_and_missing_file(tmp_path: Path):
    for target, expected in ((tmp_path, "is a directory"), (tmp_path / "nope.yaml", "no such file")):
        result = CliRunner().invoke(main, ["run", str(target)])
        assert result.exit_code == 2
        assert expected in result.stderr


def test_broken_and_looping_links_say_so(tmp_path: Path):
    """A dangling link names its target; a link loop is not reported as a missing file."""
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "gone.yaml")
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    for name, expected in (("dangling.yaml", f"broken symbolic link (to {tmp_path / 'gone.yaml'})"),
                           ("a.yaml", "cannot read: Too many levels of symbolic links")):
        result = CliRunner().invoke(main, ["run", str(tmp_path / name)])
        assert result.exit_code == 2
        assert result.stderr.strip() == f"error: {tmp_path / name}: {expected}"


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_pipes_and_devices_are_refused_before_reading(tmp_path: Path, special: str):
    """A FIFO without a writer would block the read for ever; /dev/zero would never end."""
    target = Path(special)
    if special == "fifo":
        target = tmp_path / "scenario.yaml"
        os.mkfifo(target)
    result = CliRunner().invoke(main, ["run", str(target), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {target}: not a regular file (a pipe or a device?)"


def test_real_process_prints_no_traceback(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edited(setter("network.topology.bandwidth", "fast")))
    process = subprocess.run([sys.executable, "-m", "simhpc", "run", str(bad)], capture_output=True, text=True)
    assert process.returncode == 2
    assert process.stderr.count("\n") == 1 and "Traceback" not in process.stderr
    assert "network.topology.bandwidth" in process.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["list"], ["--version"], ["calibrate", "--help"]])
def test_a_full_stdout_is_one_line_not_a_traceback(args: list[str]):
    """What click prints itself (the help, the version) and a listing, refused by the device."""
    with open("/dev/full", "w") as full:
        process = subprocess.run([sys.executable, "-m", "simhpc", *args], stdout=full, stderr=subprocess.PIPE,
                                 text=True)
    assert process.returncode == 2
    assert process.stderr == "error: standard output: No space left on device\n"


def test_out_of_memory_is_a_one_line_error(tmp_path: Path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text(VALID, encoding="utf-8")

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("simhpc.cli.run_cmd.simulate", exhausted)
    result = CliRunner().invoke(main, ["run", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: out of memory: too large to simulate on this machine (reduce the counts or sizes)"]


def test_checkpoint_buffer_too_small_for_the_state(tmp_path: Path):
    scenario = Path(__file__).parent.parent / "scenarios" / "moe_demo.yaml"
    result = CliRunner().invoke(main, ["run", str(scenario), "-o", str(tmp_path / "out"),
                                       "--set", "workload.checkpoint.buffer=0.5"])
    assert result.exit_code == 2, result.output
    assert "workload.checkpoint.buffer: a buffer of 0.5 B cuts each GPU's" in result.stderr


def test_set_values_that_are_not_yaml_stay_text_but_refused_yaml_is_reported() -> None:
    assert parse_override("name=!tagged") == ("name", "!tagged")
    assert parse_override("name=[1, 2") == ("name", "[1, 2")
    with pytest.raises(OverrideError, match="given twice"):
        parse_override("workload={kind: a, kind: b}")


def test_a_file_beyond_the_size_limit_is_refused_without_reading_it_all(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("simhpc.scenario.loader.MAX_SCENARIO_BYTES", 1000)
    path = tmp_path / "big.yaml"
    path.write_text(VALID + "#" * 2000 + "\n")
    result = CliRunner().invoke(main, ["run", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {path}: file is too large for a scenario (over 1000 bytes)"


@pytest.mark.parametrize(("args", "expected"), [
    (["run"], "error: simhpc run: Missing argument 'SCENARIO'. (see 'simhpc run --help')"),
    (["bogus"], "error: simhpc: No such command 'bogus'. (see 'simhpc --help')"),
    (["compare", "x.json", "--worst", "-1"], "error: simhpc compare: Invalid value for '--worst': -1 is not in"),
    (["run", ""], "error: simhpc run: Invalid value for 'SCENARIO': an empty path"),
    (["compare", "x.json", "-o", " "], "error: simhpc compare: Invalid value for '-o' / '--outdir': an empty path"),
    (["compare", "x.json", "--against"],  # click gives this one no context: the command is read from the line
     "error: simhpc compare: Option '--against' requires an argument. (see 'simhpc compare --help')"),
])
def test_a_bad_option_or_argument_is_one_line_too(args, expected):
    process = subprocess.run([sys.executable, "-m", "simhpc", *args], capture_output=True, text=True)
    assert process.returncode == 2
    assert process.stderr.count("\n") == 1 and process.stderr.startswith(expected), process.stderr
