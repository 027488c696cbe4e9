# cmake/Install.cmake — `cmake --install` and find_package(mixtape) for outside projects.
# Owns: the install rules for every layer library, the headers and the package config files.
# Invariant: everything is derived from the MIXTAPE_LAYERS global property that
# mixtape_layer() fills, so a new layer (amp, optim, models, data) is installed and exported
# without touching this file. It must stay included after the last mixtape_layer() call.
#
# Installed layout (<prefix> = CMAKE_INSTALL_PREFIX):
#   <prefix>/lib/libmixtape_<layer>.so          RUNPATH $ORIGIN: the layers find each other
#   <prefix>/include/mixtape/mixtape.h          the umbrella, #include <mixtape/mixtape.h>
#   <prefix>/include/mixtape/<layer>/...        headers, #include "core/tensor.h" as in-tree
#   <prefix>/lib/cmake/mixtape/mixtapeConfig.cmake (+ ConfigVersion, Targets)
include(CMakePackageConfigHelpers)

get_property(_mixtape_layers GLOBAL PROPERTY MIXTAPE_LAYERS)
set(_mixtape_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/mixtape)

# Our public headers are C++20; say so on the targets, so a consumer
# gets -std=c++20 from target_link_libraries alone (CMAKE_CXX_STANDARD is not exported).
foreach(_t IN LISTS _mixtape_layers)
  target_compile_features(${_t} PUBLIC cxx_std_20)
endforeach()

# The layers live side by side in lib/, so $ORIGIN is all they need to find each other;
# INSTALL_RPATH_USE_LINK_PATH keeps non-system dependency dirs (e.g. a custom OpenBLAS).
set_target_properties(${_mixtape_layers} PROPERTIES
  INSTALL_RPATH "$ORIGIN"
  INSTALL_RPATH_USE_LINK_PATH TRUE)

install(TARGETS ${_mixtape_layers} mixtape
  EXPORT mixtapeTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT mixtapeTargets
  NAMESPACE mixtape::
  FILE mixtapeTargets.cmake
  DESTINATION ${_mixtape_cmake_dir})

# Headers: every *.h under each layer folder that exists (the registered layers plus the
# planned ones, which may hold header-only code before they become libraries), keeping the
# sub-folders (ops/cpu/...), so the in-tree include spelling "ops/cpu/loops.h" still works.
set(_mixtape_header_folders)
foreach(_t IN LISTS _mixtape_layers)
  string(REGEX REPLACE "^mixtape_" "" _folder ${_t})
  list(APPEND _mixtape_header_folders ${_folder})
endforeach()
list(APPEND _mixtape_header_folders core autograd ops amp optim models data distributed)
list(REMOVE_DUPLICATES _mixtape_header_folders)
foreach(_folder IN LISTS _mixtape_header_folders)
  if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${_folder})
    continue()
  endif()
  file(GLOB_RECURSE _headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/${_folder}/*.h)
  foreach(_h IN LISTS _headers)
    get_filename_component(_dir ${_h} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${_h}
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixtape/${_dir})
  endforeach()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/mixtape/mixtape.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixtape)

# find_dependency() lines for the config file: one per outside package whose imported
# target an exported interface names (Threads::Threads -> find_dependency(Threads)).
# Shared layers keep OpenMP/BLAS/zlib private, so today this is just Threads; a PUBLIC
# dependency, or a static layer (whose private deps are exported), adds its package here.
set(_mixtape_iface_deps)
foreach(_t IN LISTS _mixtape_layers)
  get_target_property(_iface ${_t} INTERFACE_LINK_LIBRARIES)
  if(_iface)
    list(APPEND _mixtape_iface_deps ${_iface})
  endif()
  get_target_property(_type ${_t} TYPE)
  if(_type STREQUAL "STATIC_LIBRARY")
    get_target_property(_private ${_t} LINK_LIBRARIES)
    if(_private)
      list(APPEND _mixtape_iface_deps ${_private})
    endif()
  endif()
endforeach()
set(_mixtape_packages)
foreach(_dep IN LISTS _mixtape_iface_deps)
  string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _dep "${_dep}")
  if(_dep MATCHES "^([A-Za-z0-9_]+)::" AND TARGET ${_dep})
    get_target_property(_imported ${_dep} IMPORTED)
    if(_imported AND NOT CMAKE_MATCH_1 STREQUAL "mixtape")
      list(APPEND _mixtape_packages ${CMAKE_MATCH_1})
    endif()
  endif()
endforeach()
list(REMOVE_DUPLICATES _mixtape_packages)
set(MIXTAPE_FIND_DEPENDENCIES "")
foreach(_pkg IN LISTS _mixtape_packages)
  string(APPEND MIXTAPE_FIND_DEPENDENCIES "find_dependency(${_pkg})\n")
endforeach()

# Each layer is also a component: find_package(mixtape COMPONENTS core autograd).
set(MIXTAPE_COMPONENTS)
foreach(_t IN LISTS _mixtape_layers)
  string(REGEX REPLACE "^mixtape_" "" _folder ${_t})
  list(APPEND MIXTAPE_COMPONENTS ${_folder})
endforeach()

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/mixtapeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mixtapeConfig.cmake
  INSTALL_DESTINATION ${_mixtape_cmake_dir})
# 0.x: minor versions may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/mixtapeConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/mixtapeConfig.cmake
  ${PROJECT_BINARY_DIR}/mixtapeConfigVersion.cmake
  DESTINATION ${_mixtape_cmake_dir})
