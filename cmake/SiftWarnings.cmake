# Warnings and sanitizers, applied per target through sift_set_warnings().
function(sift_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
  if(SIFT_FATAL_WARNINGS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(SIFT_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

if(SIFT_TSAN)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()
