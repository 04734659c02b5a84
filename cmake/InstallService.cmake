# Run by `cmake --install` (cmake/BlockswapInstall.cmake): the systemd unit,
# with ExecStart and --config pointing into this install, and the default
# config file unless the machine already has one. The environment variable
# BLOCKSWAP_CONFIG_DIR, when set, overrides the config directory.
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(DEFINED ENV{BLOCKSWAP_CONFIG_DIR})
  set(config_dir "$ENV{BLOCKSWAP_CONFIG_DIR}")
elseif(BLOCKSWAP_CONFIG_DIR)
  set(config_dir "${BLOCKSWAP_CONFIG_DIR}")
elseif(prefix STREQUAL "/usr")
  set(config_dir "/etc/blockswap")
else()
  set(config_dir "${prefix}/etc/blockswap")
endif()

file(READ "${BLOCKSWAP_SOURCE_DIR}/deploy/systemd/blockswapd.service" unit)
string(REPLACE "/usr/local/bin/blockswapd" "${prefix}/${BLOCKSWAP_BINDIR}/blockswapd" unit "${unit}")
string(REPLACE "/etc/blockswap/blockswapd.toml" "${config_dir}/blockswapd.toml" unit "${unit}")
string(REPLACE "/usr/local/share/doc/blockswap" "${prefix}/${BLOCKSWAP_DOCDIR}" unit "${unit}")
set(unit_dir "$ENV{DESTDIR}${prefix}/lib/systemd/system")
file(MAKE_DIRECTORY "${unit_dir}")
file(WRITE "${unit_dir}/blockswapd.service" "${unit}")
message(STATUS "Installing: ${unit_dir}/blockswapd.service")

# file(INSTALL) adds DESTDIR to an absolute DESTINATION itself.
set(shipped "${BLOCKSWAP_SOURCE_DIR}/deploy/blockswapd.toml")
if(EXISTS "$ENV{DESTDIR}${config_dir}/blockswapd.toml")
  message(STATUS "Keeping: ${config_dir}/blockswapd.toml (the shipped default is blockswapd.toml.default)")
  file(INSTALL "${shipped}" DESTINATION "${config_dir}" RENAME blockswapd.toml.default)
else()
  file(INSTALL "${shipped}" DESTINATION "${config_dir}")
endif()
