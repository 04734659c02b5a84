# Run by `cmake --install` (cmake/BlockswapInstall.cmake): the systemd unit,
# with ExecStart and --config pointing into this install, and the default
# config file unless the machine already has one.
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(BLOCKSWAP_CONFIG_DIR)
  set(config_dir "${BLOCKSWAP_CONFIG_DIR}")
elseif(prefix STREQUAL "/usr")
  set(config_dir "/etc/blockswap")
else()
  set(config_dir "${prefix}/etc/blockswap")
endif()

file(READ "${BLOCKSWAP_SOURCE_DIR}/deploy/systemd/blockswapd.service" unit)
string(REPLACE "/usr/local/bin/blockswapd" "${prefix}/${BLOCKSWAP_BINDIR}/blockswapd" unit "${unit}")
string(REPLACE "/etc/blockswap/blockswapd.toml" "${config_dir}/blockswapd.toml" unit "${unit}")
set(unit_dir "$ENV{DESTDIR}${prefix}/lib/systemd/system")
file(MAKE_DIRECTORY "${unit_dir}")
file(WRITE "${unit_dir}/blockswapd.service" "${unit}")
message(STATUS "Installing: ${unit_dir}/blockswapd.service")

set(config "$ENV{DESTDIR}${config_dir}/blockswapd.toml")
if(EXISTS "${config}")
  message(STATUS "Keeping: ${config} (the shipped default is ${config}.default)")
  file(INSTALL "${BLOCKSWAP_SOURCE_DIR}/deploy/blockswapd.toml" DESTINATION "$ENV{DESTDIR}${config_dir}"
       RENAME blockswapd.toml.default)
else()
  file(INSTALL "${BLOCKSWAP_SOURCE_DIR}/deploy/blockswapd.toml" DESTINATION "$ENV{DESTDIR}${config_dir}")
endif()
