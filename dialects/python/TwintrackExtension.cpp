//===- TwintrackExtension.cpp - twintrack._twintrack_cpp ------------------===//
//
// Registers the twintrack dialect into a context of the `mlir` Python
// bindings, and reads its attributes. Contexts and attributes cross the
// boundary as C API capsules, so this module needs no shared nanobind state
// with the bindings.
//
//===----------------------------------------------------------------------===//

#include "twintrack-c/Dialects.h"

#include "mlir/Bindings/Python/Nanobind.h"
#include "mlir/Bindings/Python/NanobindAdaptors.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

namespace nb = nanobind;

NB_MODULE(_twintrack_cpp, m) {
  m.doc() = "twintrack's C++ dialect, registered into mlir.ir contexts";
  m.def(
      "register_dialect",
      [](MlirContext context, bool load) {
        MlirDialectHandle handle = mlirGetDialectHandle__twintrack__();
        mlirDialectHandleRegisterDialect(handle, context);
        if (load)
          mlirDialectHandleLoadDialect(handle, context);
      },
      nb::arg("context").none() = nb::none(), nb::arg("load") = true,
      "Register (and by default load) the twintrack dialect in `context` (default: the current one).");
  m.def("register_passes", &twintrackRegisterPasses,
        "Register twintrack's passes in the global pass registry (for PassManager.parse).");
  m.def(
      "dispatch_kind_name",
      [](MlirAttribute attribute) -> std::optional<std::string> {
        if (!twintrackAttributeIsADispatchKind(attribute))
          return std::nullopt;
        MlirStringRef name = twintrackDispatchKindAttrGetName(attribute);
        return std::string(name.data, name.length);
      },
      nb::arg("attribute"),
      "The case name of a #twintrack.dispatch_kind<...> attribute (\"reduction_rows\"); None for any other attribute.");
  m.def(
      "nvvm_mma_shape",
      [](int m, int n, int k, MlirContext context) { return twintrackNVVMMMAShapeAttrGet(context, m, n, k); },
      nb::arg("m"), nb::arg("n"), nb::arg("k"), nb::arg("context").none() = nb::none(),
      "#nvvm.shape<m, n, k> in `context` (default: the current one).");
  m.def(
      "gpu_loop_dim_map",
      [](int processor, MlirContext context) { return twintrackGPULoopDimMapAttrGet(context, processor); },
      nb::arg("processor"), nb::arg("context").none() = nb::none(),
      "#gpu.loop_dim_map<processor = ..., identity map and bound>; `processor` a gpu.Processor value.");
}
