# CTest: cmake/provenance.cmake on a scratch repository. Outside git both answers are unknown; in a checkout the
# SHA is HEAD's and the tree is modified exactly while a tracked file differs from HEAD or an unignored untracked
# file exists; an unchanged answer leaves the generated source untouched (nothing recompiles).
#   cmake -DSCRIPT=.../cmake/provenance.cmake -DWORK=<scratch folder> -P provenance_test.cmake
find_package(Git REQUIRED)
set(repo ${WORK}/repo)
set(out ${WORK}/provenance.cpp)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${repo})
# The scratch folder lies inside kwb's own checkout (the build folder): git must not find that one.
set(ENV{GIT_CEILING_DIRECTORIES} ${WORK})

function(git)
  execute_process(COMMAND ${GIT_EXECUTABLE} -c user.email=kwb@test -c user.name=kwb ${ARGN}
                  WORKING_DIRECTORY ${repo} RESULT_VARIABLE rc OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "git ${ARGN} failed: ${output}")
  endif()
endfunction()

function(expect step what)
  execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${repo} -DOUT=${out} -P ${SCRIPT} RESULT_VARIABLE rc)
  file(READ ${out} text)
  string(FIND "${text}" "${what}" at)
  if(NOT rc EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "${step}: expected '${what}' in the generated source (script exit ${rc}):\n${text}")
  endif()
endfunction()

expect("not a git checkout" "return {\"unknown\", std::nullopt};")
file(WRITE ${repo}/a.txt "a\n")
git(init -q)
git(add a.txt)
git(commit -q -m one)
execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse HEAD WORKING_DIRECTORY ${repo} OUTPUT_VARIABLE head
                OUTPUT_STRIP_TRAILING_WHITESPACE)
expect("clean" "return {\"${head}\", false};")
file(TIMESTAMP ${out} before "%s")
execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1.1)
expect("clean again" "false}")
file(TIMESTAMP ${out} after "%s")
if(NOT before STREQUAL after)
  message(FATAL_ERROR "an unchanged answer rewrote the generated source")
endif()
file(WRITE ${repo}/a.txt "b\n")
expect("tracked file modified" "return {\"${head}\", true};")
git(checkout -q -- a.txt)
expect("modification undone" "false}")
file(WRITE ${repo}/new.txt "n\n")
expect("untracked file" "true}")
file(WRITE ${repo}/.gitignore "new.txt\n.gitignore\n")
expect("untracked file ignored" "false}")
file(REMOVE_RECURSE ${WORK})
