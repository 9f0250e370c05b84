// envs.core._core: the Python face of the native core (nanobind). Arguments are checked here
// or in the core; a bad one raises ValueError naming it, never a crash.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "cluster.hpp"
#include "placement.hpp"

namespace nb = nanobind;
using namespace gangsched;

namespace {

template <typename T>
using Array1 = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
std::vector<T> to_vector(const Array1<T>& a) {
    return std::vector<T>(a.data(), a.data() + a.shape(0));
}

nb::ndarray<nb::numpy, int64_t, nb::ndim<1>> as_numpy(std::vector<int64_t>&& v) {
    auto* heap = new std::vector<int64_t>(std::move(v));
    nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
    return nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>(heap->data(), {heap->size()}, owner);
}

}  // namespace

NB_MODULE(_core, m) {
    m.doc() = "The native decision core of gangsched (C++17). Use it through envs.core.";
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const BadInput& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        }
    });

    nb::class_<Cluster>(m, "ClusterArrays", "The cluster arrays the core reads (envs.core.cluster_arrays builds it).")
        .def(
            "__init__",
            [](Cluster* self, int64_t num_types, const Array1<int64_t>& node_type, const Array1<double>& node_speed,
               const Array1<int64_t>& node_first_gpu, const Array1<int64_t>& node_gpus, const Array1<int64_t>& gpu_socket,
               const Array1<int64_t>& switch_level, nb::ndarray<const bool, nb::ndim<2>, nb::c_contig, nb::device::cpu> under) {
                Cluster c;
                c.num_types = num_types;
                c.num_nodes = static_cast<int64_t>(node_type.shape(0));
                c.num_switches = static_cast<int64_t>(switch_level.shape(0));
                c.num_gpus = static_cast<int64_t>(gpu_socket.shape(0));
                c.node_type = to_vector(node_type);
                c.node_speed = to_vector(node_speed);
                c.node_first_gpu = to_vector(node_first_gpu);
                c.node_gpus = to_vector(node_gpus);
                c.gpu_socket = to_vector(gpu_socket);
                c.switch_level = to_vector(switch_level);
                if (under.shape(0) != static_cast<size_t>(c.num_nodes) || under.shape(1) != static_cast<size_t>(c.num_switches))
                    throw BadInput("node_under_switch: a nodes x switches table expected");
                const bool* u = under.data();
                c.under.assign(u, u + under.size());
                for (int64_t l : c.switch_level) c.max_level = std::max(c.max_level, l);
                c.validate();
                new (self) Cluster(std::move(c));
            },
            nb::arg("num_types"), nb::arg("node_gpu_type"), nb::arg("node_speed"), nb::arg("node_first_gpu"),
            nb::arg("node_gpus"), nb::arg("gpu_socket"), nb::arg("switch_level"), nb::arg("node_under_switch"))
        .def_ro("num_nodes", &Cluster::num_nodes)
        .def_ro("num_gpus", &Cluster::num_gpus);

    m.def(
        "node_take",
        [](const Cluster& c, const std::vector<int64_t>& free, int64_t need, int64_t tp, int64_t rule) -> nb::object {
            Take take;
            if (!node_take(c, free, need, tp, rule, take)) return nb::none();
            nb::dict out;
            for (const auto& [n, k] : take) out[nb::int_(n)] = nb::int_(k);
            return out;
        },
        nb::arg("cluster"), nb::arg("free"), nb::arg("need"), nb::arg("tp"), nb::arg("rule"),
        "Per node, the GPUs a rule gives a gang (a dict in the reference's order), or None.");

    m.def(
        "pick_in_node",
        [](const Cluster& c, int64_t node, int64_t count, const Array1<bool>& avail) {
            if (node < 0 || node >= c.num_nodes) throw BadInput("node: out of range");
            if (avail.shape(0) != static_cast<size_t>(c.node_gpus[static_cast<size_t>(node)]))
                throw BadInput("avail: one flag per GPU of the node expected");
            std::vector<int64_t> out;
            pick_in_node(c, node, count, reinterpret_cast<const uint8_t*>(avail.data()), out);
            return as_numpy(std::move(out));
        },
        nb::arg("cluster"), nb::arg("node"), nb::arg("count"), nb::arg("avail"),
        "`count` available GPUs of one node, inside one NUMA socket when they fit in one.");
}
