# The include half of the layering check (DESIGN.md: "router: base, http, api, ctrl only"). Link closures
# (src/router/CMakeLists.txt) catch a library that links what it must not; this catches a header included
# across the arrows, which links fine (every module's headers are on the include path) but ties the router to
# serve's or the engine's types. Fails naming each file and line.
#
#   tessera_check_includes(DIRS <dir>... BANNED <module>...)     from a CMakeLists (configure time)
#   cmake -DDIRS="a;b" -DBANNED="serve;engine" -P cmake/check_includes.cmake   standalone (the test)
function(tessera_check_includes)
  cmake_parse_arguments(ARG "" "" "DIRS;BANNED" ${ARGN})
  list(JOIN ARG_BANNED "|" alternatives)
  set(bad "")
  foreach(dir IN LISTS ARG_DIRS)
    file(GLOB_RECURSE files "${dir}/*.h" "${dir}/*.cc")
    foreach(f IN LISTS files)
      file(STRINGS "${f}" hits REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<](${alternatives})/")
      foreach(h IN LISTS hits)
        string(STRIP "${h}" h)
        list(APPEND bad "${f}: ${h}")
      endforeach()
      if(CMAKE_PROJECT_NAME)
        set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${f}")
      endif()
    endforeach()
  endforeach()
  if(bad)
    list(JOIN bad "\n  " lines)
    message(FATAL_ERROR "layering: these files include headers of ${ARG_BANNED} (see DESIGN.md):\n  ${lines}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DIRS)
  tessera_check_includes(DIRS ${DIRS} BANNED ${BANNED})
endif()
