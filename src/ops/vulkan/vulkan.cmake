# The vulkan backend, when the Vulkan headers + loader and glslc are found: TESSERA_VULKAN auto (default), ON
# or OFF. Included from src/ops/CMakeLists.txt; sets TESSERA_VULKAN_SOURCES (empty when not built).
#
# Each shader variant is compiled by glslc to SPIR-V at build time (a Vulkan 1.0 module, or 1.1 for the
# subgroup build), and every module is embedded into one generated source as word arrays.
set(TESSERA_VULKAN auto CACHE STRING "Build the vulkan backend: auto, ON or OFF")
set(TESSERA_VULKAN_SOURCES)
if(NOT TESSERA_VULKAN STREQUAL "OFF")
  find_package(Vulkan QUIET)
  find_program(TESSERA_GLSLC glslc HINTS ${Vulkan_GLSLC_EXECUTABLE})
  if(Vulkan_FOUND AND TESSERA_GLSLC)
    set(dir ${CMAKE_CURRENT_SOURCE_DIR}/vulkan/shaders)
    set(includes ${dir}/common.glsl ${dir}/dequant.glsl)
    # name | source | glslc flags
    set(variants
      "embedding|embedding.comp|--target-env=vulkan1.0"
      "rms_norm|rms_norm.comp|--target-env=vulkan1.0"
      "rope|rope.comp|--target-env=vulkan1.0"
      "kv_write|kv_write.comp|--target-env=vulkan1.0"
      "attention|attention.comp|--target-env=vulkan1.0"
      "matmul_vec|matmul_vec.comp|--target-env=vulkan1.0"
      "matmul_vec_subgroups|matmul_vec.comp|--target-env=vulkan1.1 -DSUBGROUPS"
      "matmul_tiled|matmul_tiled.comp|--target-env=vulkan1.0"
      "elementwise|elementwise.comp|--target-env=vulkan1.0"
      "softmax|softmax.comp|--target-env=vulkan1.0"
      "argmax|argmax.comp|--target-env=vulkan1.0"
      "moe_route|moe_route.comp|--target-env=vulkan1.0"
      "moe_gate_up|moe_gate_up.comp|--target-env=vulkan1.0"
      "moe_down|moe_down.comp|--target-env=vulkan1.0"
      "split_heads|split_heads.comp|--target-env=vulkan1.0"
      "causal_conv1d|causal_conv1d.comp|--target-env=vulkan1.0"
      "gated_delta_rule|gated_delta_rule.comp|--target-env=vulkan1.0"
      "layer_norm|layer_norm.comp|--target-env=vulkan1.0"
      "attention_noncausal|attention_noncausal.comp|--target-env=vulkan1.0"
      "pool|pool.comp|--target-env=vulkan1.0")
    set(modules)
    set(spvs)
    foreach(v IN LISTS variants)
      string(REPLACE "|" ";" parts "${v}")
      list(GET parts 0 name)
      list(GET parts 1 src)
      list(GET parts 2 flags)
      separate_arguments(flags UNIX_COMMAND "${flags}")
      set(spv ${CMAKE_CURRENT_BINARY_DIR}/vulkan_shaders/${name}.spv)
      add_custom_command(OUTPUT ${spv}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/vulkan_shaders
        COMMAND ${TESSERA_GLSLC} ${flags} -I ${dir} -o ${spv} ${dir}/${src}
        DEPENDS ${dir}/${src} ${includes}
        COMMENT "glslc ${name}.spv"
        VERBATIM)
      list(APPEND modules "${name}=${spv}")
      list(APPEND spvs ${spv})
    endforeach()
    set(generated ${CMAKE_CURRENT_BINARY_DIR}/vulkan_spirv.cc)
    string(REPLACE ";" "," modules_arg "${modules}")
    add_custom_command(OUTPUT ${generated}
      COMMAND ${CMAKE_COMMAND} -DOUT=${generated} "-DMODULES=${modules_arg}"
              -P ${PROJECT_SOURCE_DIR}/cmake/embed_spirv.cmake
      DEPENDS ${spvs} ${PROJECT_SOURCE_DIR}/cmake/embed_spirv.cmake
      COMMENT "Embedding the vulkan shaders"
      VERBATIM)
    set(TESSERA_VULKAN_SOURCES
      vulkan/vulkan_backend.cc vulkan/instance.cc vulkan/gpu.cc vulkan/commands.cc vulkan/encode.cc
      vulkan/stream.cc vulkan/kernels.cc ${generated})
  elseif(TESSERA_VULKAN STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_VULKAN=ON but the Vulkan SDK (headers, loader) or glslc was not found "
                        "(Debian: libvulkan-dev glslc)")
  endif()
endif()
