# write_if_changed(PATH TEXT): writes TEXT to PATH only when PATH does not hold it already, so that a generated
# source that did not change recompiles nothing. Included by the scripts that generate sources (provenance.cmake,
# embed_schemas.cmake).
function(write_if_changed path text)
  set(old "")
  if(EXISTS ${path})
    file(READ ${path} old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE ${path} "${text}")
  endif()
endfunction()
