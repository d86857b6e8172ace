# sift_add_plugin(<name> SOURCES <files...> [STAGE_SOURCES <files...>] [LIBS <libs...>]
#                 [DEFINITIONS <defs...>] [OUTPUT_DIRECTORY <dir>] [OUTPUT_NAME <stem>])
#
# Builds one stage plugin: a MODULE library named `<OUTPUT_NAME or name>.so` (no `lib` prefix:
# the file stem is the plugin's name, e.g. plugins/prefill_full -> build/plugins/prefill_full.so)
# in ${SIFT_PLUGIN_OUTPUT_DIRECTORY}, the folder siftd scans. Every plugin gets the same flags:
#   - hidden visibility for everything (also inline functions), so plugins cannot see or
#     interpose each other's symbols;
#   - a version script that exports only `sift_plugin_entry` (cmake/sift_plugin.map);
#   - -Wl,--no-undefined, so a missing symbol fails the build, not the load;
#   - links the shared sift_runtime (and through it LibTorch), the same copies the daemon uses.
# STAGE_SOURCES (the stage class, plain C++ against plugin_api) become a static library
# `<name>_stage` that the plugin links and that unit tests link directly, without dlopen; its
# folder is on its include path. SOURCES is the thin ABI shim (plugin.cc with SIFT_PLUGIN).
# OUTPUT_DIRECTORY / OUTPUT_NAME exist for test fixtures (broken or second-version plugins) that
# must not land in the served plugins folder.
set(SIFT_PLUGIN_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/sift_plugin.map)

function(sift_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY;OUTPUT_NAME"
                        "SOURCES;STAGE_SOURCES;LIBS;DEFINITIONS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "sift_add_plugin(${name}): SOURCES is required")
  endif()
  if(NOT ARG_OUTPUT_DIRECTORY)
    set(ARG_OUTPUT_DIRECTORY ${SIFT_PLUGIN_OUTPUT_DIRECTORY})
  endif()
  if(NOT ARG_OUTPUT_NAME)
    set(ARG_OUTPUT_NAME ${name})
  endif()
  if(ARG_STAGE_SOURCES)
    add_library(${name}_stage STATIC ${ARG_STAGE_SOURCES})
    target_include_directories(${name}_stage PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(${name}_stage PUBLIC sift_runtime)
    set_target_properties(${name}_stage PROPERTIES
      POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
    sift_set_warnings(${name}_stage)
    list(APPEND ARG_LIBS ${name}_stage)
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    SUFFIX ".so"
    OUTPUT_NAME ${ARG_OUTPUT_NAME}
    LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${SIFT_PLUGIN_VERSION_SCRIPT})
  target_link_options(${name} PRIVATE
    -Wl,--version-script=${SIFT_PLUGIN_VERSION_SCRIPT} -Wl,--no-undefined)
  target_link_libraries(${name} PRIVATE sift_runtime ${ARG_LIBS})
  if(ARG_DEFINITIONS)
    target_compile_definitions(${name} PRIVATE ${ARG_DEFINITIONS})
  endif()
  sift_set_warnings(${name})
endfunction()
