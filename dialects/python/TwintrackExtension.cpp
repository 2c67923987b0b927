//===- TwintrackExtension.cpp - twintrack._twintrack_cpp ------------------===//
//
// Registers the twintrack dialect into a context of the `mlir` Python
// bindings. Contexts cross the boundary as C API capsules, so this module
// needs no shared nanobind state with the bindings.
//
//===----------------------------------------------------------------------===//

#include "twintrack-c/Dialects.h"

#include "mlir/Bindings/Python/Nanobind.h"
#include "mlir/Bindings/Python/NanobindAdaptors.h"

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
}
