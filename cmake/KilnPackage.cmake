# What `find_package(kiln)` must find again: every package whose targets kiln's exported targets link
# (kilnConfig.cmake.in writes these lines after `include(CMakeFindDependencyMacro)`).
#   kiln_find_package(NAME [args...])        find_package(NAME args...) now, and find_dependency(NAME args...)
#                                            (without REQUIRED) in the installed kilnConfig.cmake
#   kiln_config_dependency(NAME [args...])   only the find_dependency line (for optional packages, once found)
#   kiln_config_dependency_of(COMPONENT NAME [args...])
#                                            the same, found only when the consumer asks for COMPONENT
#                                            (engine, onnx, cli): find_package(kiln COMPONENTS onnx)
#   kiln_pkg_check_modules(PREFIX MODULE)    pkg_check_modules(PREFIX REQUIRED IMPORTED_TARGET MODULE) now and
#                                            in kilnConfig.cmake, so PkgConfig::PREFIX exists for consumers
# Macros, not functions: find_package's result variables (OpenCV_LIBS, MPI_CXX_FOUND) stay visible.
# The lines are collected in the global property KILN_CONFIG_DEPENDENCIES, so subfolders can add theirs.
include_guard(GLOBAL)

macro(kiln_config_dependency)
  string(JOIN " " _kiln_dep_line ${ARGN})
  set_property(GLOBAL APPEND_STRING PROPERTY KILN_CONFIG_DEPENDENCIES "find_dependency(${_kiln_dep_line})\n")
endmacro()

macro(kiln_config_dependency_of component)
  string(JOIN " " _kiln_dep_line ${ARGN})
  string(TOUPPER ${component} _kiln_dep_component)
  set_property(GLOBAL APPEND_STRING PROPERTY KILN_CONFIG_DEPENDENCIES_${_kiln_dep_component}
               "  find_dependency(${_kiln_dep_line})\n")
endmacro()

macro(kiln_find_package)
  find_package(${ARGN})
  set(_kiln_dep_args ${ARGN})
  list(REMOVE_ITEM _kiln_dep_args REQUIRED)
  kiln_config_dependency(${_kiln_dep_args})
endmacro()

macro(kiln_pkg_check_modules prefix module)
  pkg_check_modules(${prefix} REQUIRED IMPORTED_TARGET ${module})
  set_property(GLOBAL APPEND_STRING PROPERTY KILN_CONFIG_DEPENDENCIES "_kiln_pkg_check_modules(${prefix} ${module})\n")
endmacro()

# The package's components: the base (core, layers, optim, data, models, deploy: what a program that
# loads a model and predicts needs; always loaded), engine (training: MPI), onnx (export: ONNX and
# protobuf) and cli (the commands; kiln::kiln, everything). Each has its export set kiln<C>Targets.
set(KILN_COMPONENTS engine onnx cli)

# Installs a library's headers (every *.h under its folder) to include/kiln/<folder path>/ and the
# library into its component's export set as kiln::<name without kiln_>.
function(kiln_install_library name)
  set(_component "")
  if(ARGC GREATER 1)  # (ARGV1 is not reset between calls: it may hold a caller's argument)
    set(_component ${ARGV1})
  endif()
  string(REGEX REPLACE "^kiln_" "" _short ${name})
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${_short})
  kiln_export_set(_export "${_component}")
  install(TARGETS ${name} EXPORT ${_export} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  file(RELATIVE_PATH _rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/${_rel}
          FILES_MATCHING PATTERN "*.h")
endfunction()

# The export set of a component ("" = the base): kilnTargets, kilnEngineTargets, ...
function(kiln_export_set out component)
  if(component STREQUAL "")
    set(${out} kilnTargets PARENT_SCOPE)
    return()
  endif()
  if(NOT component IN_LIST KILN_COMPONENTS)
    message(FATAL_ERROR "kiln: no package component '${component}' (accepted: ${KILN_COMPONENTS})")
  endif()
  string(SUBSTRING ${component} 0 1 _first)
  string(SUBSTRING ${component} 1 -1 _rest)
  string(TOUPPER ${_first} _first)
  set(${out} kiln${_first}${_rest}Targets PARENT_SCOPE)
endfunction()

# The include directories of a kiln library: the source root in the build tree (sources include
# "core/tensor.h"), include/kiln (the same includes) and include (<kiln/core/tensor.h>) once installed.
# In the build tree, build/include holds the umbrella headers (kiln_umbrella_header), so that
# <kiln/kiln.h> means the same there as installed.
function(kiln_include_directories name scope)
  target_include_directories(${name} ${scope} $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                             $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/kiln>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endfunction()

# kiln_umbrella_header(SOURCE NAME): the header SOURCE (relative to the calling folder; it includes kiln's
# headers as "core/tensor.h") becomes <kiln/NAME> for programs: installed as P/include/kiln/NAME,
# and copied to build/include/kiln/NAME for the build tree's tests (its includes resolve through the
# source root there and through P/include/kiln once installed). The umbrellas live in cmake/, one per
# package component (kiln.h: the base; engine.h: the engine), each named by one line in CMakeLists.txt.
function(kiln_umbrella_header source name)
  set(_src ${CMAKE_CURRENT_SOURCE_DIR}/${source})
  configure_file(${_src} ${PROJECT_BINARY_DIR}/include/kiln/${name} COPYONLY)  # copied again when it changes
  install(FILES ${_src} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln RENAME ${name})
endfunction()

# The package: the components' exported targets, kiln::kiln (everything, in the cli component),
# kilnConfig.cmake and its version file. Call once, after every library target exists.
function(kiln_install_package)
  add_library(kiln_all INTERFACE)
  target_link_libraries(kiln_all INTERFACE kiln_core kiln_layers kiln_optim kiln_data kiln_models kiln_deploy
                        kiln_engine kiln_onnx kiln_cli)
  set_target_properties(kiln_all PROPERTIES EXPORT_NAME kiln)
  add_library(kiln::kiln ALIAS kiln_all)
  if(KILN_SANITIZE)  # the static libraries call the sanitizer runtimes: their users must link them
    target_link_options(kiln_core INTERFACE $<INSTALL_INTERFACE:-fsanitize=${KILN_SANITIZE}>)
  endif()
  install(TARGETS kiln_all EXPORT kilnCliTargets)

  set(KILN_WITH_MPI OFF)
  if(MPI_CXX_FOUND)
    set(KILN_WITH_MPI ON)
  endif()
  set(_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
  install(EXPORT kilnTargets NAMESPACE kiln:: FILE kilnTargets.cmake DESTINATION ${_dir})
  foreach(_c ${KILN_COMPONENTS})
    kiln_export_set(_export ${_c})
    install(EXPORT ${_export} NAMESPACE kiln:: FILE ${_export}.cmake DESTINATION ${_dir})
  endforeach()
  get_property(KILN_CONFIG_DEPENDENCIES GLOBAL PROPERTY KILN_CONFIG_DEPENDENCIES)
  foreach(_c ENGINE ONNX CLI)
    get_property(KILN_CONFIG_DEPENDENCIES_${_c} GLOBAL PROPERTY KILN_CONFIG_DEPENDENCIES_${_c})
  endforeach()
  include(CMakePackageConfigHelpers)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                                ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${_dir})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
                                   COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
          DESTINATION ${_dir})
endfunction()
