include(CMakePackageConfigHelpers)
set(THREECHAINS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ThreeChains)

install(TARGETS threechains threechains_core threechains_ucp_ifunc EXPORT ThreeChainsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS threechains-pack threechains-key EXPORT ThreeChainsTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS threechains-gpu-worker threechains-compile-worker RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/threechains)
if(TARGET threechains-inspect)
  install(TARGETS threechains-inspect threechains-build RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/threechains DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/cmake/ThreeChainsIfunc.cmake
              ${PROJECT_SOURCE_DIR}/cmake/threechains-prelink.ld DESTINATION ${THREECHAINS_CMAKE_DIR})

install(EXPORT ThreeChainsTargets NAMESPACE ThreeChains:: DESTINATION ${THREECHAINS_CMAKE_DIR})
export(EXPORT ThreeChainsTargets NAMESPACE ThreeChains::
  FILE ${PROJECT_BINARY_DIR}/ThreeChainsTargets.cmake)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ThreeChainsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ThreeChainsConfig.cmake INSTALL_DESTINATION ${THREECHAINS_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ThreeChainsConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ThreeChainsConfig.cmake ${PROJECT_BINARY_DIR}/ThreeChainsConfigVersion.cmake
  DESTINATION ${THREECHAINS_CMAKE_DIR})

# pkg-config, for Makefiles: relocatable (the prefix is found from the .pc's
# own place, so a scratch prefix works as well as /usr/local).
set(THREECHAINS_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
string(REGEX REPLACE "[^/]+" ".." THREECHAINS_PC_UP ${THREECHAINS_PC_DIR})
configure_file(${PROJECT_SOURCE_DIR}/cmake/threechains.pc.in ${PROJECT_BINARY_DIR}/threechains.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/threechains.pc DESTINATION ${THREECHAINS_PC_DIR})
configure_file(${PROJECT_SOURCE_DIR}/cmake/threechains-ucp-ifunc.pc.in
  ${PROJECT_BINARY_DIR}/threechains-ucp-ifunc.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/threechains-ucp-ifunc.pc DESTINATION ${THREECHAINS_PC_DIR})
