# Injected into a scratch configure by the router_never_links_the_engine test (CMAKE_PROJECT_INCLUDE): links
# the engine into tessera_router after every target exists, which the check in src/router/CMakeLists.txt must
# refuse.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL target_link_libraries tessera_router PUBLIC tessera_engine)
