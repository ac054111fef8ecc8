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


def test_16_bit_floats_need_native_vector_arithmetic():
    """fp16/bf16 run at twice the fp32 rate only where the vector unit multiplies them natively
    (A64FX: fp16; Sapphire Rapids: both); an AVX2 CPU converts them and computes in fp32."""
    cpus = builtin_catalog().cpus
    assert cpus["a64fx"].peak_flops("fp16") == pytest.approx(2 * cpus["a64fx"].peak_flops("fp32"))
    assert cpus["a64fx"].peak_flops("bf16") == pytest.approx(cpus["a64fx"].peak_flops("fp32"))
    for dtype in ("fp16", "bf16"):
        assert cpus["spr-8480"].peak_flops(dtype) == pytest.approx(2 * cpus["spr-8480"].peak_flops("fp32"))
        assert cpus["epyc-7742"].peak_flops(dtype) == pytest.approx(cpus["epyc-7742"].peak_flops("fp32"))
    assert cpus["epyc-7742"].simd.lanes("fp16") == 16  # storage width is unchanged
    spec = {"sockets": 1, "cores_per_socket": 4, "clock": "2 GHz", "memory_bandwidth": "100 GB/s",
            "memory_latency": "100 ns", "max_outstanding_misses": 10,
            "simd": {"isa": "avx2", "width_bits": 256, "fma_units": 2, "half": ["fp8"]}}
    with pytest.raises(CatalogError, match=r"hardware\.cpus\.c\.simd\.half"):
        builtin_catalog().merged({"cpus": {"c": spec}}, "hardware")


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


def test_a_node_local_storage_cannot_also_be_shared():
    odd = {"bandwidth": "1 GB/s", "latency": "1 ms", "capacity": "1 TB", "shared": True, "local": True}
    with pytest.raises(CatalogError, match=r"hardware\.storage\.odd\.local: a node-local device cannot also be shared"):
        builtin_catalog().merged({"storage": {"odd": odd}}, "hardware")
