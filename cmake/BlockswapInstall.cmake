# What `cmake --install` (and deploy/install.sh) puts on a machine:
#   bin/blockswapd, bin/blockswapctl, bin/blockswap-demo (a trainer's load
#     loop: what a container or a node runs to try the daemon)
#   lib/libblockswap.so*, include/blockswap/blockswap.h(pp) (not torch.h: the
#     LibTorch layer links the torch wheel's LibTorch and is not installed)
#   share/man/man{1,8}: the programs' man pages (cmake/BlockswapManPages.cmake)
#   share/doc/blockswap/README.md (the unit's Documentation=)
#   lib/cmake/blockswap/: find_package(blockswap) -> blockswap::blockswap
#   lib/systemd/system/blockswapd.service (ExecStart = this prefix's blockswapd)
#   <config dir>/blockswapd.toml, unless one is there already
# The config directory is BLOCKSWAP_CONFIG_DIR when set (deploy/install.sh
# passes /etc/blockswap), else /etc/blockswap for the prefix /usr and
# <prefix>/etc/blockswap otherwise. Paths that depend on the prefix are
# computed at install time, so `cmake --install --prefix DIR` is consistent.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(BLOCKSWAP_CONFIG_DIR "" CACHE STRING
    "Where the installed blockswapd.toml goes (empty: derived from the install prefix)")

install(TARGETS blockswapd blockswapctl blockswap-demo RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
# blockswapctl trace --png finds it at bin/../share/blockswap/.
install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/blockswapctl/trace_png.py
        DESTINATION ${CMAKE_INSTALL_DATADIR}/blockswap)
install(TARGETS blockswap EXPORT blockswapTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/include/blockswap
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN .gitkeep EXCLUDE PATTERN torch.h EXCLUDE)
install(EXPORT blockswapTargets NAMESPACE blockswap::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/blockswap)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/blockswapConfig.cmake.in
  ${PROJECT_BINARY_DIR}/blockswapConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/blockswap)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/blockswapConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/blockswapConfig.cmake
              ${PROJECT_BINARY_DIR}/blockswapConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/blockswap)

include(${PROJECT_SOURCE_DIR}/cmake/BlockswapManPages.cmake)

install(CODE "
  set(BLOCKSWAP_DOCDIR \"${CMAKE_INSTALL_DOCDIR}\")
  set(BLOCKSWAP_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(BLOCKSWAP_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(BLOCKSWAP_CONFIG_DIR \"${BLOCKSWAP_CONFIG_DIR}\")
")
install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/InstallService.cmake)
