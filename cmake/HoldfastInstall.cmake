# Install rules and Debian packages (README "Install"; the hooks in slurm.conf: docs/slurm.md).
# Included once the tree is declared: it names the programs the tree built.
#
#   cmake --install build --prefix P      everything under P (GNUInstallDirs):
#     P/bin/                 holdfastd runctl holdfast-train holdfast-rollout holdfast-reward
#                            holdfast-health, and its helper holdfast-health-gpu beside it
#     P/sbin/                holdfast-slurmctld-epilog (run by slurmctld, not by users)
#     P/libexec/holdfast/    the Slurm hooks: holdfast-prolog.sh, holdfast-slurmctld-epilog.sh
#     P/share/holdfast/      runbooks/, examples/, scripts/ (quickstart), python/holdfast
#     P/share/doc/holdfast/  README.md and docs/
#     P/share/man/man1, man8 the programs' man pages (help2man, from --help and --version)
#     P/share/bash-completion/completions/  runctl, holdfastd
#     P/lib/python3/dist-packages/holdfast.pth   puts P/share/holdfast/python on python3's path
#   cpack -G DEB (in build/)  holdfast_VERSION_ARCH.deb (component holdfast) and
#                             python3-holdfast_VERSION_all.deb (component python), prefix /usr
#
# Nothing installed names the prefix it was configured with: programs find what they need from
# their own location (/proc/self/exe; the folder offsets below, compiled in), the hooks from
# theirs, so `--prefix`, DESTDIR and the .deb's /usr all work from one configured build.
include(GNUInstallDirs)

set(HOLDFAST_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/holdfast)
set(HOLDFAST_INSTALL_HOOKDIR ${CMAKE_INSTALL_LIBEXECDIR}/holdfast)
set(HOLDFAST_INSTALL_PYTHONDIR ${HOLDFAST_INSTALL_DATADIR}/python)

# A folder offset between two install folders, prefix-independent ("../share/holdfast/runbooks").
function(holdfast_install_offset out from to)
  file(RELATIVE_PATH rel "${CMAKE_INSTALL_PREFIX}/${from}" "${CMAKE_INSTALL_PREFIX}/${to}")
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()

# ---- where installed programs look (compiled in) -------------------------------------------
# runctl prints a runbook as the installed file, found from runctl's folder (cli/runbook_path.h);
# a build-tree runctl falls back to this source tree's runbooks/.
holdfast_install_offset(_hf_bin_to_runbooks ${CMAKE_INSTALL_BINDIR} ${HOLDFAST_INSTALL_DATADIR}/runbooks)
# (On that one file: the checkout's path in a compile line costs each checkout its ccache entry.)
set_source_files_properties(${PROJECT_SOURCE_DIR}/cli/runbook_path.cc DIRECTORY ${PROJECT_SOURCE_DIR}/cli
  PROPERTIES COMPILE_DEFINITIONS "HOLDFAST_RUNBOOKS_FROM_BIN=\"${_hf_bin_to_runbooks}\";HOLDFAST_SOURCE_RUNBOOKS=\"${PROJECT_SOURCE_DIR}/runbooks\"")

# ---- programs ----------------------------------------------------------------------------
set(_hf_programs holdfastd runctl holdfast-reward holdfast-health holdfast-health-gpu)
foreach(t holdfast-train holdfast-rollout)  # with LibTorch only
  if(TARGET ${t})
    list(APPEND _hf_programs ${t})
  endif()
endforeach()
# The CUDA libraries (and any other outside the system folders) are found at run time the way
# the build tree finds them: their folders go into the installed programs' RUNPATH.
set_target_properties(${_hf_programs} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS ${_hf_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT holdfast)
if(TARGET holdfast-slurmctld-epilog)
  set_target_properties(holdfast-slurmctld-epilog PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS holdfast-slurmctld-epilog RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT holdfast)
endif()

# ---- the Slurm hooks ---------------------------------------------------------------------
# examples/slurm/*.sh run as they are (programs from $HOLDFAST_HEALTH / PATH); the installed
# copies carry the offset from their folder to the installed programs in their one
# `holdfast_programs_from_here=` line, so they run the programs of the prefix they were installed in.
function(holdfast_install_hook script to_dir)
  set(src ${PROJECT_SOURCE_DIR}/examples/slurm/${script})
  file(READ ${src} text)
  holdfast_install_offset(rel ${HOLDFAST_INSTALL_HOOKDIR} ${to_dir})
  string(REPLACE "\nholdfast_programs_from_here=\n" "\nholdfast_programs_from_here=${rel}\n" installed "${text}")
  if(installed STREQUAL text)
    message(FATAL_ERROR "${src}: no line 'holdfast_programs_from_here=' for the installed copy to set")
  endif()
  set(out ${PROJECT_BINARY_DIR}/install/hooks/${script})
  file(CONFIGURE OUTPUT ${out} CONTENT "${installed}" @ONLY)
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${src})
  install(PROGRAMS ${out} DESTINATION ${HOLDFAST_INSTALL_HOOKDIR} COMPONENT holdfast)
endfunction()
holdfast_install_hook(holdfast-prolog.sh ${CMAKE_INSTALL_BINDIR})
holdfast_install_hook(holdfast-slurmctld-epilog.sh ${CMAKE_INSTALL_SBINDIR})

# ---- man pages and bash completion (docs/cli.md) ------------------------------------------
# Each program's man page is help2man's rendering of its --help and --version, made when the
# program is built (so it says what that program accepts); P/share/man/man1 and man8. Not in
# sanitizer or fuzz builds, whose programs are not meant to run at build time.
find_program(HOLDFAST_HELP2MAN help2man)
set(HOLDFAST_MAN_PAGES "")
if(HOLDFAST_HELP2MAN AND NOT HOLDFAST_SANITIZE AND NOT HOLDFAST_FUZZ)
  set(_hf_man_programs
    "holdfastd|1|supervise a training run: launch its ranks, detect crashes and hangs, restart, record"
    "runctl|1|status, lineage, triage and control of Holdfast training runs"
    "holdfast-train|1|data-parallel GPT training with complete, bit-exact state"
    "holdfast-rollout|1|a rollout worker of a GRPO run"
    "holdfast-reward|1|reward service and data emitter of a verifiable RL task"
    "holdfast-health|1|node health checks (GPU, NCCL, InfiniBand, host), also Slurm's Prolog"
    "holdfast-slurmctld-epilog|8|Slurm's EpilogSlurmctld: finishes a requeue holdfastd asked for")
  foreach(entry ${_hf_man_programs})
    string(REPLACE "|" ";" entry "${entry}")
    list(GET entry 0 prog)
    list(GET entry 1 section)
    list(GET entry 2 summary)
    if(NOT TARGET ${prog})
      continue()
    endif()
    set(page ${PROJECT_BINARY_DIR}/man/man${section}/${prog}.${section})
    add_custom_command(OUTPUT ${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man/man${section}
      COMMAND ${HOLDFAST_HELP2MAN} --no-info --no-discard-stderr --section=${section} "--name=${summary}"
              --output=${page} $<TARGET_FILE:${prog}>
      DEPENDS ${prog} VERBATIM COMMENT "man page ${prog}.${section}")
    list(APPEND HOLDFAST_MAN_PAGES ${page})
    install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section} COMPONENT holdfast)
  endforeach()
  add_custom_target(holdfast_man_pages ALL DEPENDS ${HOLDFAST_MAN_PAGES})
  if(TARGET cli_programs_test)
    add_dependencies(cli_programs_test holdfast_man_pages)
    set_property(TARGET cli_programs_test APPEND PROPERTY COMPILE_DEFINITIONS
      "HOLDFAST_TEST_MAN_DIR=\"${PROJECT_BINARY_DIR}/man\"")
  endif()
elseif(NOT HOLDFAST_HELP2MAN)
  message(WARNING "holdfast: help2man not found: no man pages (install help2man; scripts/setup.sh)")
endif()
install(FILES ${PROJECT_SOURCE_DIR}/cli/completion/runctl.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME runctl COMPONENT holdfast)
install(FILES ${PROJECT_SOURCE_DIR}/cli/completion/holdfastd.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME holdfastd COMPONENT holdfast)

# ---- runbooks, examples, the quickstart, docs ----------------------------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runbooks/ DESTINATION ${HOLDFAST_INSTALL_DATADIR}/runbooks
  COMPONENT holdfast FILES_MATCHING PATTERN "*.md")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${HOLDFAST_INSTALL_DATADIR}/examples
  COMPONENT holdfast USE_SOURCE_PERMISSIONS PATTERN "__pycache__" EXCLUDE)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/quickstart.sh ${PROJECT_SOURCE_DIR}/scripts/make_corpus.sh
  DESTINATION ${HOLDFAST_INSTALL_DATADIR}/scripts COMPONENT holdfast)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT holdfast)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs COMPONENT holdfast)

# ---- the Python module (component python: python3-holdfast) -------------------------------
# The module's files under share/holdfast/python (PYTHONPATH=P/share/holdfast/python), and a
# .pth in the folder Debian's python3 reads (/usr/lib/python3/dist-packages) that adds that
# folder, named relative to the .pth so that any prefix works.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/common/python/holdfast DESTINATION ${HOLDFAST_INSTALL_PYTHONDIR}
  COMPONENT python FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
set(_hf_dist_packages lib/python3/dist-packages)
holdfast_install_offset(_hf_pth_to_python ${_hf_dist_packages} ${HOLDFAST_INSTALL_PYTHONDIR})
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/install/holdfast.pth CONTENT "${_hf_pth_to_python}\n")
install(FILES ${PROJECT_BINARY_DIR}/install/holdfast.pth DESTINATION ${_hf_dist_packages} COMPONENT python)

# ---- Debian packages (cpack -G DEB) --------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME holdfast)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "Holdfast developers <holdfast@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # the programs without their debug info (RelWithDebInfo: ~350 MB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL holdfast python)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # holdfast_0.1.0_amd64.deb, python3-holdfast_0.1.0_all.deb
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_HOLDFAST_PACKAGE_NAME holdfast)
set(CPACK_DEBIAN_HOLDFAST_PACKAGE_SHLIBDEPS ON)  # Depends: from dpkg-shlibdeps
# The first line of a description is the package's summary.
set(CPACK_DEBIAN_HOLDFAST_DESCRIPTION "supervisor that keeps large training runs alive on Slurm
holdfastd, runctl, holdfast-train, holdfast-health and the Slurm hooks, with the
runbooks and examples under /usr/share/holdfast.")
set(CPACK_DEBIAN_HOLDFAST_PACKAGE_SUGGESTS "python3-holdfast, slurm-wlm")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-holdfast)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
# py3compile on install, py3clean on removal (cmake/debian/python3-holdfast/): no stray __pycache__ left behind.
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/cmake/debian/python3-holdfast/postinst ${PROJECT_SOURCE_DIR}/cmake/debian/python3-holdfast/prerm)
set(CPACK_DEBIAN_PYTHON_DESCRIPTION "progress reporting for jobs supervised by holdfastd (Python 3)
The holdfast module: a job's step, phase and collectives, which holdfastd reads
to detect hangs and name the rank and collective at fault.")
include(CPack)
