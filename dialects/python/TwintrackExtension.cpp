//===- TwintrackExtension.cpp - twintrack._twintrack_cpp ------------------===//
//
// Registers the twintrack dialect into a context of the `mlir` Python
// bindings, reads its attributes, and prints operations. Contexts,
// attributes and operations cross the boundary as C API capsules, so this
// module needs no shared nanobind state with the bindings.
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

namespace {

/// The printer's output appended to a std::string. (The bindings' own
/// get_asm hands every token to a Python callback: 2.5x slower on stage dumps.)
void appendToString(MlirStringRef part, void *userData) {
  static_cast<std::string *>(userData)->append(part.data, part.length);
}

nb::str operationText(MlirOperation op, std::optional<intptr_t> largeElementsLimit,
                      std::optional<intptr_t> largeResourceLimit, bool assumeVerified, bool genericForm,
                      bool debugInfo, bool localScope) {
  MlirOpPrintingFlags flags = mlirOpPrintingFlagsCreate();
  if (largeElementsLimit)
    mlirOpPrintingFlagsElideLargeElementsAttrs(flags, *largeElementsLimit);
  if (largeResourceLimit)
    mlirOpPrintingFlagsElideLargeResourceString(flags, *largeResourceLimit);
  if (assumeVerified)
    mlirOpPrintingFlagsAssumeVerified(flags);
  if (genericForm)
    mlirOpPrintingFlagsPrintGenericOpForm(flags);
  if (debugInfo)
    mlirOpPrintingFlagsEnableDebugInfo(flags, /*enable=*/true, /*prettyForm=*/false);
  if (localScope)
    mlirOpPrintingFlagsUseLocalScope(flags);
  std::string text;
  {
    nb::gil_scoped_release released; // printing runs no Python
    mlirOperationPrintWithFlags(op, flags, appendToString, &text);
  }
  mlirOpPrintingFlagsDestroy(flags);
  return nb::str(text.data(), text.size());
}

} // namespace

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
  m.def("operation_text", &operationText, nb::arg("operation"), nb::arg("large_elements_limit").none() = nb::none(),
        nb::arg("large_resource_limit").none() = nb::none(), nb::arg("assume_verified") = false,
        nb::arg("print_generic_op_form") = false, nb::arg("enable_debug_info") = false,
        nb::arg("use_local_scope") = false,
        "`operation` as text, as Operation.get_asm with the same flags prints it.");
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
