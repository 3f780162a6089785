# Editing a header that an ifunc's sources include rebuilds its container
# (threechains_add_ifunc passes clang's dependency file to the build tool).
#   cmake -DSOURCE=<consumer> -DWORK=<scratch> -DPREFIX=<install> -DGENERATOR=<g> -P header_rebuild.cmake
file(REMOVE_RECURSE ${WORK})
file(COPY ${SOURCE}/ DESTINATION ${WORK}/src)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN} failed (${rc}):\n${out}")
  endif()
endfunction()

run(${CMAKE_COMMAND} -S ${WORK}/src -B ${WORK}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK}/build --target adder adder_binary)
foreach(container adder adder_binary)
  file(TIMESTAMP ${WORK}/build/${container}.tcc before_${container} "%s")
endforeach()
# Timestamps have one-second resolution here.
run(${CMAKE_COMMAND} -E sleep 1.5)
file(TOUCH ${WORK}/src/adder.h)
run(${CMAKE_COMMAND} --build ${WORK}/build --target adder adder_binary)
foreach(container adder adder_binary)
  file(TIMESTAMP ${WORK}/build/${container}.tcc after "%s")
  if(NOT after GREATER before_${container})
    message(FATAL_ERROR "editing adder.h did not rebuild ${container}.tcc")
  endif()
  message(STATUS "editing adder.h rebuilt ${container}.tcc")
endforeach()
