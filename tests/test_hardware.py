import pytest

from simhpc.hardware import CatalogError, builtin_catalog


def test_catalog_has_required_parts():
    catalog = builtin_catalog()
    for gpu in ("v100", "a100", "h100"):
        assert gpu in catalog.gpus
    for cpu in ("a64fx", "arm-sve-64c", "spr-8480"):
        assert cpu in catalog.cpus
    assert catalog.nodes["dgx-a100"].gpus == 8


def test_peaks_follow_from_simd_unit():
    catalog = builtin_catalog()
    a64fx = catalog.cpus["a64fx"]
    # 48 cores x 2.2 GHz x 8 fp64 lanes x 2 FMA pipes x 2 = 3.379 TFLOP/s (Fujitsu spec sheet)
    assert a64fx.simd.lanes("fp64") == 8
    assert a64fx.peak_flops("fp64") == pytest.approx(3.3792e12)
    assert a64fx.peak_flops("fp32") == pytest.approx(2 * 3.3792e12)
    assert catalog.gpus["v100"].flops("fp64") == pytest.approx(7.8e12)


def test_catalog_errors_name_the_field():
    with pytest.raises(CatalogError, match=r"hardware\.gpus\.x\.memory_bandwidth"):
        builtin_catalog().merged({"gpus": {"x": {"peak_flops": {"fp32": "1 TFLOP/s"},
                                                  "memory_bandwidth": "fast", "memory_capacity": "1 GiB"}}},
                                 "hardware")
    with pytest.raises(CatalogError, match=r"hardware\.nodes\.n\.gpu: unknown gpu 'b200'"):
        builtin_catalog().merged({"nodes": {"n": {"cpu": "a64fx", "host_memory": "1 GiB", "gpu": "b200"}}},
                                 "hardware")


def test_scenario_hardware_adds_entries():
    catalog = builtin_catalog().merged(
        {"gpus": {"mygpu": {"peak_flops": {"fp32": "10 TFLOP/s"}, "memory_bandwidth": "1 TB/s",
                            "memory_capacity": "16 GiB"}}}, "hardware")
    assert catalog.gpus["mygpu"].memory_bandwidth == 1e12
    assert "mygpu" not in builtin_catalog().gpus
