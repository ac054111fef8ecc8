"""Sweep specs: expansion (grid product, zip, seeds), run keys, and bad specs failing up front."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simhpc.cli import main
from simhpc.errors import ScenarioError
from simhpc.scenario.loader import scenario_from_dict
from simhpc.sweep import load_plan, parse_grid_option, parse_spec, plan_sweep, run_key
from simhpc.sweep.spec import split_values

BASE = {
    "name": "tiny",
    "seed": 0,
    "network": {"mode": "analytic",
                "topology": {"kind": "single_switch", "hosts": 4, "bandwidth": "100 Gb/s",
                             "latency": "1 us"}},
    "workload": {"kind": "collective", "collective": "all_reduce", "size": "1 MiB", "iterations": 1},
}


def write_scenario(folder: Path, sweep: object, name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump({**BASE, "sweep": sweep}, sort_keys=False), encoding="utf-8")
    return path


def test_grid_is_a_product_zip_varies_together_seeds_innermost():
    spec = parse_spec({"grid": {"workload.size": ["1 MiB", "2 MiB"], "workload.algorithm": ["ring", "tree"]},
                       "zip": {"workload.iterations": [1, 2], "network.topology.hosts": [4, 8]},
                       "seeds": [3, 4]}, "s.yaml")
    plan = plan_sweep(BASE, "s.yaml", spec)
    assert len(plan.points) == plan.combinations == 2 * 2 * 2 * 2
    first = plan.points[0]
    assert first.params == {"workload.size": "1 MiB", "workload.algorithm": "ring",
                            "workload.iterations": 1, "network.topology.hosts": 4}
    assert [p.seed for p in plan.points[:4]] == [3, 4, 3, 4]
    assert plan.points[2].params["network.topology.hosts"] == 8
    assert plan.points[2].params["workload.iterations"] == 2
    for point in plan.points:  # zip pairs only
        pair = (point.params["workload.iterations"], point.params["network.topology.hosts"])
        assert pair in [(1, 4), (2, 8)]
        assert point.resolved["seed"] == point.seed
        size = {"1 MiB": 2**20, "2 MiB": 2**21}[point.params["workload.size"]]
        assert point.resolved["workload"]["size"] == size
    assert len({p.key for p in plan.points}) == len(plan.points)


def test_run_key_is_the_resolved_scenario_so_equal_points_merge():
    spec = parse_spec({"grid": {"workload.size": ["1 MiB", 1048576, "2 MiB"]}}, "s.yaml")
    plan = plan_sweep({**BASE, "sweep": {"ignored": True}}, "s.yaml", spec)
    assert plan.combinations == 3 and len(plan.points) == 2
    direct = scenario_from_dict({**BASE, "sweep": {"grid": {}}}, "x")
    assert plan.points[0].key == run_key(direct)  # the sweep section is not part of the key
    assert len(plan.points[0].key) == 64


def test_a_seed_listed_twice_merges_as_a_repeated_grid_value_does():
    spec = parse_spec({"grid": {"workload.size": ["1 MiB", "1 MiB"]}, "seeds": [5, 5, 6]}, "s.yaml")
    plan = plan_sweep(BASE, "s.yaml", spec)
    assert plan.combinations == 6
    assert [point.seed for point in plan.points] == [5, 6]


def test_no_seeds_keeps_the_scenario_seed(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "seed": 7}), encoding="utf-8")
    plan = load_plan(path, grid=["workload.algorithm=ring,tree"])
    assert [p.seed for p in plan.points] == [7, 7]


def test_grid_option_values_are_yaml():
    assert parse_grid_option("workload.size=1 MiB, 4 MiB") == ("workload.size", ["1 MiB", "4 MiB"])
    assert parse_grid_option("workload.iterations=1,2") == ("workload.iterations", [1, 2])
    assert parse_grid_option("network.topology.dims=[2, 2],[4,4]") == ("network.topology.dims",
                                                                        [[2, 2], [4, 4]])
    assert parse_grid_option("workload.iterations=[1, 2]") == ("workload.iterations", [1, 2])
    assert split_values("a,'b,c',[1,2]") == ["a", "'b,c'", "[1,2]"]


def test_a_grid_path_given_twice_is_an_error(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"workload\.algorithm: given twice"):
        load_plan(path, grid=["workload.algorithm=ring", "workload.algorithm=tree"])


def test_a_spec_file_with_more_than_its_sweep_names_the_extra_key(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    spec = tmp_path / "spec.yaml"
    spec.write_text("sweep:\n  seeds: [1, 2]\nextra: 1\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="extra: unknown field"):
        load_plan(path, spec_file=spec)


def test_set_and_separate_spec_file(tmp_path):
    scenario = write_scenario(tmp_path, {"grid": {"workload.size": ["1 MiB", "2 MiB"]}})
    spec = tmp_path / "spec.yaml"
    spec.write_text("sweep:\n  zip:\n    workload.algorithm: [ring, tree]\n  seeds: [1, 2, 3]\n",
                    encoding="utf-8")
    plan = load_plan(scenario, overrides=["workload.iterations=2"], spec_file=spec)
    assert len(plan.points) == 6
    assert all(p.resolved["workload"]["iterations"] == 2 for p in plan.points)
    assert plan.describe()["sweep"] == {"zip": {"workload.algorithm": ["ring", "tree"]}, "seeds": [1, 2, 3]}
    spec.write_text("# nothing yet\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"spec\.yaml: file is empty, expected a sweep spec mapping"):
        load_plan(scenario, spec_file=spec)


BAD_SPECS = [
    ("unknown-path", {"grid": {"workload.sizee": ["1 MiB"]}}, [], "sweep.grid.workload.sizee: unknown field"),
    ("unknown-parent", {"grid": {"workload.foo.bar": [1]}}, [],
     "sweep.grid.workload.foo.bar: unknown field at workload.foo"),
    ("empty-list", {"grid": {"workload.size": []}}, [], "sweep.grid.workload.size: empty list of values"),
    ("bad-executor", {"grid": {"workload.size": ["1 MiB"]}}, ["--executor", "mpi"],
     "--executor must be local, dask or dask://HOST:PORT"),
    ("scheduler-twice", {"grid": {"workload.size": ["1 MiB"]}},
     ["--executor", "dask://127.0.0.1:1", "--scheduler", "tcp://127.0.0.1:1"], "either as --executor"),
    ("not-a-list", {"grid": {"workload.size": "1 MiB"}}, [], "sweep.grid.workload.size: expected a list"),
    ("zip-lengths", {"zip": {"workload.size": ["1 MiB", "2 MiB"], "workload.iterations": [1]}}, [],
     "sweep.zip: zip lists must have the same length"),
    ("bad-value", {"grid": {"network.topology.bandwidth": ["100 Gb/s", "fast"]}}, [],
     "sweep.grid.network.topology.bandwidth: expected a bandwidth"),
    ("unknown-section", {"grids": {"workload.size": ["1 MiB"]}}, [], "sweep.grids: unknown field"),
    ("empty-seeds", {"seeds": []}, [], "sweep.seeds: empty list of seeds"),
    ("negative-seed", {"seeds": [1, -1]}, [], "sweep.seeds: seeds must be integers >= 0"),
    ("seed-as-path", {"grid": {"seed": [1, 2]}}, [], "sweep.grid.seed: the seed is swept with 'seeds"),
    ("both-grid-and-zip", {"grid": {"workload.size": ["1 MiB"]}, "zip": {"workload.size": ["2 MiB"]}}, [],
     "swept in both grid and zip"),
    ("nothing", None, [], "nothing to sweep"),
    ("grid-no-equals", None, ["--grid", "workload.size"],
     "--grid: workload.size: expected --grid PATH=V1,V2"),
    ("grid-empty", None, ["--grid", "workload.size="], "empty list of values"),
    ("grid-empty-item", None, ["--grid", "workload.size=1 MiB,,2 MiB"], "empty value"),
    ("grid-no-path", None, ["--grid", "=1,2"], "malformed path"),
    ("grid-unknown-path", None, ["--grid", "workload.sizee=1,2"], "sweep.grid.workload.sizee: unknown field"),
    ("local-with-scheduler", {"seeds": [1]}, ["--executor", "local", "--scheduler", "tcp://127.0.0.1:1"],
     "--scheduler needs --executor dask"),
    ("scheduler-port-out-of-range", {"seeds": [1]}, ["--executor", "dask://127.0.0.1:99999"],
     "Dask scheduler address 'tcp://127.0.0.1:99999': expected tcp://HOST:PORT, a port from 1 to 65535"),
    ("empty-scheduler", {"seeds": [1]}, ["--executor", "dask", "--scheduler", ""], "Dask scheduler address ''"),
    # A field sharing its name with the workload kind ('collective'): not confused with the union tag.
    ("bad-value-of-kind-named-field", {"grid": {"workload.collective": ["all_reduce", "allreduce"]}}, [],
     "sweep.grid.workload.collective: Input should be"),
    # A mistake of the base scenario is not blamed on the swept path next to it.
    ("bad-base-beside-swept-path", {"grid": {"workload.size": ["1 MiB", "2 MiB"]}},
     ["--set", "workload.collective=allreduce"], ".yaml: workload.collective: Input should be"),
    ("bad-set-value-is-named", {"grid": {"workload.size": ["1 MiB", "2 MiB"]}},
     ["--set", "workload.collective=allreduce"], "(--set workload.collective=allreduce)"),
]


@pytest.mark.parametrize(("sweep", "args", "expected"), [case[1:] for case in BAD_SPECS],
                         ids=[case[0] for case in BAD_SPECS])
def test_bad_spec_is_one_line_exit_2_before_anything_runs(tmp_path, sweep, args, expected):
    scenario = write_scenario(tmp_path, sweep)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["sweep", str(scenario), "-o", str(out), *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert expected in lines[0]
    assert not out.exists()  # no store, no run


def test_bad_value_in_a_late_point_still_fails_up_front(tmp_path):
    scenario = write_scenario(tmp_path, {"grid": {"workload.size": ["1 MiB"] * 3 + ["0 B"]}})
    with pytest.raises(ScenarioError, match=r"sweep\.grid\.workload\.size: .*greater than 0"):
        load_plan(scenario)


def test_dry_run_lists_points_and_writes_nothing(tmp_path):
    scenario = write_scenario(tmp_path, {"grid": {"workload.algorithm": ["ring", "tree"]}, "seeds": [0, 1]})
    result = CliRunner().invoke(main, ["sweep", str(scenario), "-o", str(tmp_path / "out"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith("4 runs")
    assert "workload.algorithm=tree, seed=1" in result.output
    assert not (tmp_path / "out").exists()


def test_run_refuses_a_malformed_sweep_section_naming_its_field(tmp_path):
    path = write_scenario(tmp_path, {"grid": {"workload.size": "1 MiB"}})
    result = CliRunner().invoke(main, ["run", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "sweep.grid.workload.size: expected a list of values" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()
    good = write_scenario(tmp_path, {"grid": {"workload.size": ["1 MiB", "2 MiB"]}}, "good.yaml")
    assert CliRunner().invoke(main, ["run", str(good), "-o", str(tmp_path / "ok")]).exit_code == 0
