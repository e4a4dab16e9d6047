# `cmake --install <build> --prefix P` installs the static libraries, the public headers and a package config,
# so that an outside project can use trainkit with
#   find_package(trainkit REQUIRED)
#   target_link_libraries(app PRIVATE trainkit::trainkit)
# (examples/CMakeLists.txt is such a project). Included by the top-level CMakeLists.txt.
include(CMakePackageConfigHelpers)
set(TK_CONFIG_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trainkit)

install(TARGETS trainkit trainkit_data EXPORT trainkitTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The process libhdf5 reads files in (src/data/hdf5_isolation.h): found by an installed program as
# TK_HDF5_HELPER, beside the program, or at <configured prefix>/libexec/trainkit-hdf5-helper.
install(TARGETS trainkit_hdf5_helper RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR})
# The whole folder, so that headers added later are installed without touching this file.
install(DIRECTORY include/trainkit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT trainkitTargets NAMESPACE trainkit:: DESTINATION ${TK_CONFIG_DESTINATION})

# What trainkitConfig.cmake needs to find the static libraries' dependencies again, as this build found them.
get_filename_component(TK_OPENBLAS_LIB_DIR "${OPENBLAS_LIB}" DIRECTORY)
set(TK_HDF5_LIB_DIR "")
foreach(tk_lib IN LISTS HDF5_C_LIBRARIES)
  if(tk_lib MATCHES "/lib(hdf5|hdf5_serial)\\.(so|a)$")
    get_filename_component(TK_HDF5_LIB_DIR "${tk_lib}" DIRECTORY)
    break()
  endif()
endforeach()
set(TK_DNNL_LIB_DIR "")
if(TK_HAVE_ONEDNN)
  get_filename_component(TK_DNNL_LIB_DIR "${DNNL_LIBRARY}" DIRECTORY)
endif()
set(TK_NCCL_LIB_DIR "")
if(TK_HAVE_NCCL)
  get_filename_component(TK_NCCL_LIB_DIR "${NCCL_LIBRARY}" DIRECTORY)
endif()
set(TK_CUDA_ROOT "")
if(TK_CUDA_ENABLED)
  get_filename_component(TK_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(cmake/trainkitConfig.cmake.in ${PROJECT_BINARY_DIR}/trainkitConfig.cmake
                              INSTALL_DESTINATION ${TK_CONFIG_DESTINATION} NO_SET_AND_CHECK_MACRO)
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/trainkitConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/trainkitConfig.cmake ${PROJECT_BINARY_DIR}/trainkitConfigVersion.cmake
        DESTINATION ${TK_CONFIG_DESTINATION})
